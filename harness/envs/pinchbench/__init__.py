"""PinchBench (`pinchbench/skill`, MIT): OpenClaw-style agent tasks in markdown files with YAML front matter.

`tasks.py` loads a local clone (version 1: every `tasks/task_*.md`; version 2: `tasks/manifest.yaml`) into frozen
task records and a filterable table; `workspace.py` builds each task's fresh, confined workspace."""
