"""The smolvm engine: one microVM per run. `engine` is the engine the supervisor drives; `child`
the per-run process that holds the VM (and the keeper of a warm base); `bases` the frozen base
VMs branches are made from; `protocol` what the engine and its child say to each other."""
