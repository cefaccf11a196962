"""Test double of ``tensorrt_llm.Mapping`` (tensorrt_llm/mapping.py): the rank layout of a tp x pp
(x cp) model, with the real constructor's keywords and its world-size check."""

from __future__ import annotations


class Mapping:
    def __init__(self, world_size: int = 1, rank: int = 0, gpus_per_node: int = 8, *, cp_size: int = 1,
                 tp_size: int = 1, pp_size: int = 1, moe_tp_size: int = -1, moe_ep_size: int = -1,
                 **kwargs) -> None:
        if world_size != tp_size * pp_size * cp_size:
            raise ValueError(f"world_size must equal to tp_size * pp_size * cp_size, but got {world_size} != "
                             f"{tp_size} * {pp_size} * {cp_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is out of range for world_size {world_size}")
        self.world_size = world_size
        self.rank = rank
        self.gpus_per_node = gpus_per_node
        self.cp_size = cp_size
        self.tp_size = tp_size
        self.pp_size = pp_size
        self.moe_tp_size = tp_size if moe_tp_size == -1 else moe_tp_size
        self.moe_ep_size = 1 if moe_ep_size == -1 else moe_ep_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def pp_rank(self) -> int:
        return self.rank // (self.tp_size * self.cp_size)

    def has_tp(self) -> bool:
        return self.tp_size > 1

    def has_pp(self) -> bool:
        return self.pp_size > 1

    def to_dict(self) -> dict:
        return {"world_size": self.world_size, "gpus_per_node": self.gpus_per_node, "cp_size": self.cp_size,
                "tp_size": self.tp_size, "pp_size": self.pp_size, "moe_tp_size": self.moe_tp_size,
                "moe_ep_size": self.moe_ep_size, "auto_parallel": False}

    def __repr__(self) -> str:
        return (f"Mapping(world_size={self.world_size}, rank={self.rank}, tp_size={self.tp_size}, "
                f"pp_size={self.pp_size})")
