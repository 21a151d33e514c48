"""What several test modules share: fake kernel trees, shards cut from real runs, a mail
thread, the CI jobs a plan makes, a cache's entries."""
