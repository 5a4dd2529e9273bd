"""What runs around train.py's loop and is not the method: building and closing a run
(`loop/run.py`: seeds, the policy, the environments, --resume, the files at the end) and watching
each step (`loop/watch.py`: timing, the progress bar, metrics, signals and alarms, the evaluations,
the token inspector, checkpoints). train.py's five steps call into here by name; nothing here
decides what the policy learns."""
