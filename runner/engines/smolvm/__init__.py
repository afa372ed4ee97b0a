"""The smolvm engine: one microVM per run. `engine` is the engine the supervisor drives; `child`
the per-run process that holds the VM (and the keeper of a warm base); `protocol` what the engine
and its child say to each other, `control` the engine's reader of it; `warm` building, branching
and sweeping the frozen bases branches are made from, `bases` what a host knows of them;
`runtime` the installed smolvm and its traversable copy; `checks` the canary boots and doctor."""
