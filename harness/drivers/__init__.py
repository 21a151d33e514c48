"""The commands' drivers, request in, report out (run, check, mutate, bisect, shell,
doctor), the pipeline that runs one matrix cell, and the matrix itself."""
