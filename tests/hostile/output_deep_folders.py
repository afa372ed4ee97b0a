# cordon: {"outcome": "output_limit", "exit_code": 0, "outputs": ["shallow/a/b/c/kept.txt"], "reason_has": ["wrote output folders nested more than 16 deep"], "rejected_has": {"deep/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d": "nested more than 16 deep"}, "limits": {"output_max_files": 256}}
# A chain of nested folders as deep as the output area's inodes allow (1,100 asked; about 1,080
# fit at the maximum file cap). Export used to walk it recursively and fail as the supervisor's
# own error; it stops at 16 folders and refuses the rest, charged to the program.
import os

os.makedirs("/output/shallow/a/b/c")
with open("/output/shallow/a/b/c/kept.txt", "w") as handle:
    handle.write("a normal nested output")
os.chdir("/output")
made = 0
try:
    for _ in range(1100):
        os.mkdir("deep" if made == 0 else "d")
        os.chdir("deep" if made == 0 else "d")
        made += 1
except OSError as exc:
    print(f"stopped at {made} folders: {exc.strerror}")
print(f"made {made} nested folders")
