"""Generated gRPC code of the gateway protocol v1 (protos/llmrl/llm_gateway/v1/); regenerate it
with `make protos`, never edit the *_pb2* files by hand."""
