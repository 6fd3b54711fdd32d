"""The loop and its contract: events, observers, errors, the model protocol, tools, detectors."""
