"""Where ``make docs-deploy`` publishes the site: GitHub Pages of the checkout's ``origin``.

``mkdocs gh-deploy`` pushes the built site to the ``gh-pages`` branch of ``origin``;
GitHub serves it at ``https://<owner>.github.io/<repo>/``. This prints the two addresses
the build needs, as shell assignments, from ``git remote get-url origin``::

    FLEETRL_SITE_URL=https://<owner>.github.io/<repo>/
    FLEETRL_REPO_URL=https://github.com/<owner>/<repo>

``mkdocs.yml`` reads them (``site_url``, ``repo_url``: the sitemap, canonical links and
the header's repository link). Set both in the environment to publish elsewhere; an
``origin`` that is not on GitHub, or none, is refused with what to set.

    python docs/deploy_address.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

#: the forms of a GitHub remote: https://github.com/o/r(.git), git@github.com:o/r(.git),
#: ssh://git@github.com/o/r(.git)
GITHUB_REMOTE = re.compile(
    r"^(?:https://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
    r"(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)

NOT_GITHUB_MSG = (
    "docs-deploy: the remote 'origin' ({remote}) is not a GitHub repository, so its Pages "
    "address is not known; set FLEETRL_SITE_URL (where the site will be served) and "
    "FLEETRL_REPO_URL (the repository's page) and run make docs-deploy again"
)
NO_REMOTE_MSG = (
    "docs-deploy: this checkout has no remote 'origin' to push the site's gh-pages branch "
    "to; add one (git remote add origin https://github.com/<owner>/<repo>), or set "
    "FLEETRL_SITE_URL and FLEETRL_REPO_URL for another host"
)


def addresses(remote: str) -> tuple[str, str]:
    """(site address, repository address) of a GitHub remote URL; ValueError otherwise.

    Examples:
        >>> addresses("git@github.com:fleetrl/fleetrl.git")
        ('https://fleetrl.github.io/fleetrl/', 'https://github.com/fleetrl/fleetrl')
        >>> addresses("https://github.com/Some-Org/rl.docs")[0]
        'https://some-org.github.io/rl.docs/'
    """
    match = GITHUB_REMOTE.match(remote.strip())
    if match is None:
        raise ValueError(NOT_GITHUB_MSG.format(remote=remote.strip()))
    owner, repo = match["owner"], match["repo"]
    return f"https://{owner.lower()}.github.io/{repo}/", f"https://github.com/{owner}/{repo}"


def main() -> int:
    site, repo = os.environ.get("FLEETRL_SITE_URL"), os.environ.get("FLEETRL_REPO_URL")
    if not (site and repo):
        try:
            remote = subprocess.run(
                ["git", "remote", "get-url", "origin"], capture_output=True, text=True, check=True
            ).stdout
        except (subprocess.CalledProcessError, FileNotFoundError):
            print(NO_REMOTE_MSG, file=sys.stderr)
            return 2
        try:
            site, repo = addresses(remote)
        except ValueError as err:
            print(err, file=sys.stderr)
            return 2
    print(f"FLEETRL_SITE_URL={site}")
    print(f"FLEETRL_REPO_URL={repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
