"""The only contract between services: subjects, typed messages, the tensor wire codec, the event log."""
