"""The guest side: the runner script and the protocol it speaks with the host."""
