"""The collector on Ray: :class:`~fleetrl.collectors.remote.collector.RayCollector`, its
checks and plan, the worker actor and the pool that keeps them, sync rounds and first-ready
tasks, the elastic fleet, versioned weights, the replay actor and what the driver counts.
Importing this package loads nothing."""
