"""Developer tools: protobuf descriptor generation and example model generation."""
