"""The collector in one process: :class:`~fleetrl.collectors.local.sync.SyncDataCollector`
and its rollout's parts (single-agent and grouped envs, overlap, the policy's plan, episode
bookkeeping, whole trajectories). Importing this package loads nothing."""
