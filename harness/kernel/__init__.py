"""The kernel: its sources, the series applied, the .config, the build and the store of
built kernels, the features a built kernel has."""
