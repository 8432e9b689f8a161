"""The experiment contract: registry, config resolution, claims, runner and reports."""
