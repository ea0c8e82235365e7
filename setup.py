"""Maps the repo's top-level folders onto the `vidax` namespace (pyproject.toml holds the metadata).

`translator/` is `vidax.translator`, `zoo/` is `vidax.zoo`, `cli/` is `vidax.cli`, `serve/` is `vidax.serve`
(its `static/` page ships with it) and the TOML specs in `conversion_specs/` ship as `vidax.conversion_specs`.
Subpackages (one folder per model family) are found automatically, so adding a family needs no edit here.
"""

from setuptools import find_packages, setup

FOLDERS = {
    "translator": "vidax.translator",
    "zoo": "vidax.zoo",
    "cli": "vidax.cli",
    "serve": "vidax.serve",
    "conversion_specs": "vidax.conversion_specs",
}

package_dir = {}
packages = []
for folder, name in FOLDERS.items():
    package_dir[name] = folder
    packages.append(name)
    for sub in find_packages(folder):
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
        packages.append(f"{name}.{sub}")

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"vidax.conversion_specs": ["*.toml", "**/*.toml"], "vidax.serve": ["static/*"]},
    include_package_data=True,
)
