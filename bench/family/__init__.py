"""One family's benches (bench_<family>_*), run by `python -m bench <family>`."""
