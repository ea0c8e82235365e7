"""One generation: its options, the family contract, the run handed to each stage, the denoise loop."""
