"""The devices and what runs on them: mesh, sharding, multi-process runs, attention and its kernels,
layers, CPU tuning, the compile cache, memory arithmetic. Imports no other room of zoo."""
