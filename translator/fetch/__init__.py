"""Where checkpoints come from: local folders and files, Hub repos, headers read over HTTP."""
