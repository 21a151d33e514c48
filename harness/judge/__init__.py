"""Judging what a kernel and its tests said: KTAP and test_progs output, splats, the
outcome of a test, the verdict of a cell, mutants and coverage. Pure: text in, results out."""
