"""Generated protobuf field tables (gen_protobuf.py); data only."""
