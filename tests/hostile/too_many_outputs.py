# cordon: {"outcome": "output_limit", "exit_code": 0, "outputs_count": 8, "rejected_has": {"f08.txt": "over the cap of 8 files"}, "limits": {"output_max_files": 8}}
for i in range(40):
    with open(f"/output/f{i:02}.txt", "w") as handle:
        handle.write(str(i))
print("wrote 40 files")
