//! Pods as processes: images, restarts, probes, init containers, environment, DNS, termination.
