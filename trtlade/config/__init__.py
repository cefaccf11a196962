"""Deployment config: schema (pydantic v2), loading with YAML positions, grps_trtllm configs."""
