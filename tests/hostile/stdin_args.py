# cordon: {"outcome": "succeeded", "stdin": "21\nline two \u00fc\n", "args": ["--n", "two words", "$HOME;rm -rf /"], "inputs": ["nested"], "stdout_has": ["double 42", "rest 'line two \u00fc\\n'", "args ['--n', 'two words', '$HOME;rm -rf /']", "nested n,double", "nested folder read-only"], "limits": {"wall_timeout_s": 10}}
import os
import sys

print("double", int(sys.stdin.readline()) * 2)
print("rest", repr(sys.stdin.read()))
print("args", sys.argv[1:])
print("nested", open("/input/outputs/result.csv").readline().strip())
try:
    open("/input/outputs/mine.txt", "w")
except OSError:
    print("nested folder read-only")
print(sorted(os.listdir("/input")), sorted(os.listdir("/input/outputs")))
