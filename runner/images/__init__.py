"""Guest images: build from Debian packages, record by archive digest, verify the extracted tree.

An image is a docker-save archive (its sha256 is the digest smolvm keys on) plus a read-only
extracted rootfs keyed by that digest, which the namespace engine binds. The archive is the
root of trust: `verify` re-derives the expected tree from it and compares path by path.

A recipe (images/<name>/recipe.toml) names Debian packages, and may prune some that Debian makes
a dependency but nothing in the image uses; files under images/<name>/rootfs/ are laid over the
installed tree. Both are part of the recipe's hash, so changing either rebuilds the image.

Two lock files, one format. The host's record ($CORDON_IMAGES_DIR/built.json) says what this
host built; runs resolve and verify images by it. The tracked images/lock.json is the reference
pin: a build compares with it and says whether it reproduced it, but only `images pin`, a
deliberate developer action, writes it.

Four modules: `recipes` (recipes, lock files, the types), `build`, `verify`, and `store` (the
ImageStore that builds, finds and verifies). What the rest of Cordon uses is named here.
"""

from runner.images.build import INDEX_FILE
from runner.images.recipes import (
    BuildResult,
    BuiltImage,
    ImageError,
    ImageRef,
    LockEntry,
    OverlayFile,
    Recipe,
    load_recipe,
    read_lock,
    recipe_names,
)
from runner.images.store import ImageStore

__all__ = [
    "INDEX_FILE", "BuildResult", "BuiltImage", "ImageError", "ImageRef", "ImageStore", "LockEntry", "OverlayFile",
    "Recipe", "load_recipe", "read_lock", "recipe_names",
]  # fmt: skip
