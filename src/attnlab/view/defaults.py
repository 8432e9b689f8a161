"""The viewer's defaults, torch-free: the command line reads them when its parser is built."""

DEFAULT_POLICIES = ("window", "sinks", "h2o", "sinks+h2o")
DEFAULT_TOKENS, DEFAULT_BUDGET, DEFAULT_CHUNK = 512, 64, 8
VIEW_FILE = "view.html"  # the page a run folder links (attnlab probe, the probes experiment)
MAX_TOKENS = 2048  # the page holds L·H·T² bytes before compression: 16x the 512-token page
