"""The ground every layer stands on: the model, errors, the one subprocess wrapper, git,
atomic writes and the cache layout."""
