"""The gRPC front end: inference.GRPCInferenceService on grpc.aio, plus grpc.health.v1."""
