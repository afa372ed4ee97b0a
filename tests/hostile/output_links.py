# cordon: {"outcome": "succeeded", "outputs": ["good.json"], "rejected_has": {"passwd": "symbolic link", "pipe": "FIFO", "hard-a.txt": "hard link", "hard-b.txt": "hard link", "escape": "symbolic link"}}
import json
import os

with open("/output/good.json", "w") as handle:
    json.dump({"ok": True}, handle)
os.symlink("/etc/passwd", "/output/passwd")
os.symlink("/", "/output/escape")
os.mkfifo("/output/pipe")
with open("/output/hard-a.txt", "w") as handle:
    handle.write("same inode")
os.link("/output/hard-a.txt", "/output/hard-b.txt")
