"""CI systems: the GitHub and GitLab pipelines made from the matrix, their plan and cache
keys, and shards of a run and their merge."""
