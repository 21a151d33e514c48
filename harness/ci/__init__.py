"""`harness ci`: the GitHub and GitLab pipelines made from the matrix, their plan and
cache keys, annotations of runs' failures, and what the matrix costs in runner-minutes."""
