"""``trtlade tune``: measure candidate (w,n,g) specs per concurrency on the user's own traffic and
hardware, pick one per load, and write it as a ``lookahead.schedule``.

- :mod:`trtlade.tune.candidates`: which specs to try, and how they were pruned (pure);
- :mod:`trtlade.tune.select`: the choice per concurrency, noise-aware, under latency limits (pure);
- :mod:`trtlade.tune.measure`: the interleaved, repeated measurement against a server;
- :mod:`trtlade.tune.report`: the report folder (schedule snippet, table, heatmap, recommendation);
- :mod:`trtlade.tune.apply`: writing the schedule into a config, keeping its comments.
"""
