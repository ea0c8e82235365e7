"""Maps the repo's top-level folders onto the `vidax` namespace (pyproject.toml holds the metadata).

`translator/` is `vidax.translator`, `zoo/` is `vidax.zoo`, `cli/` is `vidax.cli`, `serve/` is `vidax.serve`
(its `static/` page ships with it), `train/` is `vidax.train` (`vidax-train`), `eval/` is `vidax.eval` (`vidax-eval`) and the TOML specs in `conversion_specs/` ship as `vidax.conversion_specs`.
Subpackages (one folder per model family) are found automatically, so adding a family needs no edit here.
Every folder is declared a package, data-only ones too (`conversion_specs/wan/`, `serve/static/`): setuptools
treats any folder as importable and warns at length about each one left out of `packages`.
"""

import warnings

from setuptools import find_namespace_packages, setup

# `pip install -e .` maps the folders onto `vidax` with an import finder, and setuptools then always prints
# a notice that a folder named like the package in the working directory would shadow it: none is named
# `vidax` here, so the notice has no cause to fix.
warnings.filterwarnings("ignore", message="Editable installation")

FOLDERS = {
    "translator": "vidax.translator",
    "zoo": "vidax.zoo",
    "cli": "vidax.cli",
    "serve": "vidax.serve",
    "train": "vidax.train",
    "eval": "vidax.eval",
    "conversion_specs": "vidax.conversion_specs",
}

package_dir = {}
packages = []
for folder, name in FOLDERS.items():
    package_dir[name] = folder
    packages.append(name)
    for sub in find_namespace_packages(folder, exclude=["__pycache__", "*.__pycache__"]):
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
        packages.append(f"{name}.{sub}")

setup(
    packages=packages,
    package_dir=package_dir,
    # "": every package (the specs' folders); wan-tiny's trained diffusers-layout folder, each subfolder a package,
    # its LoRA example (tiny_lora) and wan-tiny-vace's folder (tiny_vace: its vae, text_encoder, tokenizer link to tiny_model's)
    package_data={"": ["*.toml"], "vidax.serve.static": ["*"],
                  **{name: ["*.json", "*.safetensors"] for name in packages
                     if name.startswith(("vidax.zoo.wan.tiny_model", "vidax.zoo.wan.tiny_lora", "vidax.zoo.wan.tiny_vace"))}},
    include_package_data=True,
)
