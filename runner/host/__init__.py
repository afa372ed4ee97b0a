"""The host's primitives under every sandbox: cgroups, mounts and files (hostfs), the fork server
that starts a sandbox (spawner), its network namespace (netns), run locks, memory and slot
admission, and the seccomp filter. Nothing here imports anything above it."""
