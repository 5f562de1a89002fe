"""The imperative shell shared by every trainer: configs, run directories, logs,
checkpoints, progress bars and plots."""
