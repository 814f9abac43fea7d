"""Third-party training data for the code embedder: permissively licensed source
distributions from PyPI (issue 35, decision (a)).

~9.5k docstring pairs from the standard library were too little data, so packages from
PyPI may join it. The list is recorded in training/configs/embed-corpus.json: for each
package its pinned version, the license as the package declares it in its PyPI
metadata (and which field said so), the sdist's file name, address, size and sha256,
and its role. A role is "train" (mined for pairs) or "dev" (whole packages held out for
development: choices of the recipe are made on them, never on an evaluation set). The
role follows a rule that does not look at the rest of the list (dev when
crc32(name) % DEV_MODULUS == 0), so adding a package never moves another one.

What never enters the list (tests/training/test_embed_corpus.py checks it):
- a package that a benchmark or test of ours evaluates on (EVALUATED_PACKAGES), nor a
  fork, a re-packaging or a copy of one or of the standard library's code
  (RELATED_PACKAGES), nor a package holding a copy of one (`vendored`);
- a package installed in tachy's environment: bench.codesearch picks its third-party
  trees from there, so whatever it evaluates later is not trained on now;
- a license outside the permissive families (MIT, BSD, Apache-2.0, PSF, ISC), or one
  the metadata does not state plainly (left out rather than guessed).

Nothing is downloaded at import time or by the tests. The recipe calls `download`
(or `trees_by_role`), which fetches each sdist by its recorded address, checks its
sha256, and keeps only its .py files, extracted safely, in CACHE/NAME-VERSION/
(default ~/.cache/tachy/embed-corpus); a package already there is not fetched again.

    python -m training.embed.corpus --refresh    # rebuild the file from PACKAGES (network)
    python -m training.embed.corpus --download   # fill the cache
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

CORPUS_FILE = Path(__file__).resolve().parents[1] / "configs" / "embed-corpus.json"
DEV_MODULUS = 7  # about one package in seven is held out for development
ROLES = ("train", "dev")
MARKER = ".tachy-corpus.json"  # in a cached tree: what it was extracted from

# Distributions (PEP 503 names) that a benchmark or test of ours evaluates on. Never
# trained or tuned on. Where each comes from (the test checks that each is here):
EVALUATED_PACKAGES = frozenset(
    {
        # bench.codesearch THIRD_PARTY: its third-party trees ("attr" is attrs)
        "attrs", "click", "httpx", "jinja2", "requests", "rich", "urllib3",
        # training.tasks.pypi DEFAULT_PROJECTS: the projects tasks are built from
        "more-itertools", "toolz", "inflection", "python-slugify", "semver", "tabulate",
        "boltons",
        # bench.index's size levels: trees it indexes and queries
        "networkx", "torch", "sympy", "pip",
    }
)  # fmt: skip
# Their import names, to find a copy of one inside another package's sdist.
EVALUATED_MODULES = frozenset(
    {
        "attr", "attrs", "click", "httpx", "jinja2", "requests", "rich", "urllib3",
        "more_itertools", "toolz", "inflection", "slugify", "semver", "tabulate", "boltons",
        "networkx", "torch", "sympy", "pip",
    }
)  # fmt: skip
# Forks and re-packagings of those, and backports (copies) of the standard library,
# whose evaluation units (training/configs/embed-split.json) are held out too.
RELATED_PACKAGES = frozenset(
    {
        "niquests", "urllib3-future", "requests3", "httpx2", "asyncclick", "cloup", "jinja",
        "attr", "cattrs", "cytoolz", "toolz-stubs", "more-itertools-stubs", "pip-tools",
        "simplejson", "futures", "argparse", "backports-tarfile", "backports-shutil-which",
        "backports-tempfile", "configparser", "mock", "typing-extensions", "importlib-metadata",
        "importlib-resources", "zipp", "tomli", "exceptiongroup", "dataclasses", "pathlib2",
        "contextlib2", "singledispatch", "enum34", "subprocess32",
    }
)  # fmt: skip

# The names `--refresh` turns into the list: well-documented, medium-sized, mostly
# pure-Python libraries of many kinds, none installed in tachy's environment. Looked at
# and left out: peewee (its metadata states no license), invoke, isort and yapf (they
# vendor other packages), glom (built on boltons, whose author it shares), bleach (a
# copy of html5lib inside), virtualenv (pip, with requests inside, in its seed wheels),
# the HTTP-client, requests, Pallets and encode families (too close to the evaluated
# trees); colorama, jmespath, croniter, schema, python-dotenv, tenacity, ptyprocess,
# pyasn1, patsy, pint, wrapt, pyflakes, uncertainties (few usable docstrings for their
# size) and redis (some 2,000 near-identical command docstrings would outweigh the rest).
PACKAGES = (
    "alembic", "apscheduler", "arrow", "asttokens", "beautifulsoup4", "cachetools", "cerberus",
    "configobj", "construct", "coverage", "deepdiff", "dill", "diskcache", "dnspython", "ecdsa",
    "falcon", "fastjsonschema", "fire", "funcy", "html5lib", "humanfriendly", "humanize",
    "hyperlink", "inflect", "jedi", "jsonpatch", "jsonpickle", "lark", "mako", "markdown",
    "marshmallow", "mistune", "natsort", "netaddr", "oauthlib", "openpyxl", "parsimonious",
    "parso", "passlib", "pexpect", "plumbum", "prettytable", "prompt-toolkit", "pycodestyle",
    "pydash", "pypdf", "pyrsistent", "python-docx", "rsa", "simpy", "soupsieve", "sqlparse",
    "structlog", "tomlkit", "tornado", "traitlets", "transitions", "trio", "voluptuous",
    "websockets",
)  # fmt: skip

MAX_SDIST_BYTES = 32 << 20  # an sdist larger than this is refused
MAX_FILE_BYTES = 1 << 20  # a .py file larger than this is generated data: skipped
MAX_TREE_BYTES = 64 << 20  # the .py files of one package, together
MAX_FILES = 20_000

PYPI_JSON = "https://pypi.org/pypi/{name}/json"
PYPI_VERSION_JSON = "https://pypi.org/pypi/{name}/{version}/json"
FILES_HOST = "https://files.pythonhosted.org/packages/"

Opener = Callable[..., Any]  # urllib.request.urlopen's shape: opener(url, timeout=s)


class CorpusError(ValueError):
    """A package of the corpus that cannot be used; the message names it."""


class Unconfirmed(Exception):
    """A candidate left out by `refresh`; the message is the reason."""


def canonical(name: str) -> str:
    """The PEP 503 form of a distribution name ("More_Itertools" -> "more-itertools")."""
    return re.sub(r"[-_.]+", "-", name).lower()


def role_of(name: str) -> str:
    return "dev" if zlib.crc32(canonical(name).encode()) % DEV_MODULUS == 0 else "train"


# ------------------------------------------------------------------ licenses
_SPDX = {
    "mit": "MIT", "mit-0": "MIT", "bsd-2-clause": "BSD", "bsd-3-clause": "BSD",
    "0bsd": "BSD", "apache-2.0": "Apache-2.0", "psf-2.0": "PSF", "python-2.0": "PSF",
    "isc": "ISC",
}  # fmt: skip
_BSD_KIND = r"(new|modified|simplified|revised|[23][- ]clause)"
# Whole texts in lower case, parentheses already taken out ("ISC License (ISCL)").
_WORDS = (
    ("MIT", re.compile(r"(the\s+)?(mit|expat)(\s+licen[sc]e)?(\s+(mit|expat))?")),
    (
        "BSD",
        re.compile(
            rf"({_BSD_KIND}\s+)?bsd(\s*|-)({_BSD_KIND}(\s+|-)?)?(licen[sc]e)?(\s+{_BSD_KIND})?"
        ),
    ),
    (
        "Apache-2.0",
        re.compile(r"apache(\s+software)?(\s+licen[sc]e)?(,?\s*(version\s*|v)?2(\.0)?)?"),
    ),
    (
        "PSF",
        re.compile(
            r"(psfl?|python\s+software\s+foundation(\s+licen[sc]e)?)(\s*(v|version\s*)?2(\.0)?)?"
        ),
    ),
    ("ISC", re.compile(r"isc(\s+licen[sc]e)?(\s+iscl)?|iscl")),
)
_CLASSIFIER = re.compile(r"^license\s*::\s*(osi approved\s*::\s*)?", re.IGNORECASE)


def license_family(text: str) -> str | None:
    """The permissive family of a declared license ("MIT", "BSD", "Apache-2.0", "PSF",
    "ISC", or several joined by "+" for "MIT OR Apache-2.0"), else None.

    `text` is an SPDX expression, a short license field ("BSD License", "Apache 2.0"),
    a Trove classifier, or several of those joined by "; ". Every part must be
    permissive, even the alternatives of an OR; a WITH exception is not accepted."""
    parts = re.split(r";|\s+(?:OR|AND)\s+", text.replace("(", " ").replace(")", " "))
    families = set()
    for part in parts:
        words = " ".join(_CLASSIFIER.sub("", part.strip()).split()).lower()
        if not words or " with " in f" {words} ":
            return None
        family = _SPDX.get(words) or next(
            (name for name, pattern in _WORDS if pattern.fullmatch(words)), None
        )
        if family is None:
            return None
        families.add(family)
    return "+".join(sorted(families)) or None


def declared_license(info: dict[str, Any]) -> tuple[str, str]:
    """(license, field) as a package's PyPI metadata declares it: its PEP 639
    license_expression, else a short `license` field, else its license classifiers.
    Unconfirmed when none is there or any of them is not permissive."""
    expression = (info.get("license_expression") or "").strip()
    field = (info.get("license") or "").strip()
    short = field if field and "\n" not in field and len(field) <= 100 else ""
    classifiers = [
        c
        for c in info.get("classifiers") or []
        if c.startswith("License ::") and c.strip() != "License :: OSI Approved"
    ]
    named = [_CLASSIFIER.sub("", c).strip() for c in classifiers]
    if expression:
        declared = (expression, "license_expression")
    elif short:
        declared = (short, "license")
    elif named:
        declared = ("; ".join(named), "classifiers")
    else:
        raise Unconfirmed("its metadata states no license")
    for said in (expression, short, *named):
        if said and license_family(said) is None:
            raise Unconfirmed(f"its metadata says the license is {said!r}: not a permissive one")
    if field and not short and re.search(r"\bGNU\b|\bGPL|Mozilla", field):
        raise Unconfirmed("its license text is not a permissive one")
    return declared


# --------------------------------------------------------------------- entries
@dataclass(frozen=True)
class Entry:
    """One package of the corpus, as recorded in training/configs/embed-corpus.json."""

    name: str
    version: str
    license: str  # as the package declares it
    license_from: str  # the metadata field: license_expression, license or classifiers
    role: str  # "train" or "dev"
    filename: str
    url: str
    size: int
    sha256: str


_PINNED = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_entries(entries: Iterable[Entry]) -> list[str]:
    """What is wrong with a list of entries (empty when it is sound)."""
    problems: list[str] = []
    seen: set[str] = set()
    for e in entries:
        key = canonical(e.name)
        where = f"{e.name} {e.version}"
        if key in seen:
            problems.append(f"{e.name}: listed twice")
        seen.add(key)
        if key in EVALUATED_PACKAGES or key in RELATED_PACKAGES:
            problems.append(f"{e.name}: evaluated by a benchmark or test (or a copy of one)")
        if not _PINNED.match(e.version):
            problems.append(f"{where}: the version is not one pinned release")
        if license_family(e.license) is None:
            problems.append(f"{where}: license {e.license!r} is not a permissive one")
        if e.role not in ROLES or e.role != role_of(e.name):
            problems.append(f"{where}: role {e.role!r}, the rule says {role_of(e.name)!r}")
        if not _SHA256.match(e.sha256):
            problems.append(f"{where}: sha256 {e.sha256!r} is not 64 hex digits")
        if not e.filename.endswith(".tar.gz") or "/" in e.filename:
            problems.append(f"{where}: {e.filename!r} is not an sdist (.tar.gz)")
        if not e.url.startswith("https://") or not e.url.endswith("/" + e.filename):
            problems.append(f"{where}: {e.url!r} is not an https address of {e.filename}")
        if not 0 < e.size <= MAX_SDIST_BYTES:
            problems.append(f"{where}: size {e.size} out of range")
    return problems


def read_corpus(path: Path = CORPUS_FILE) -> list[Entry]:
    """The recorded packages; ValueError naming the file when it is missing, malformed
    or breaks a rule of the list."""
    try:
        data = json.loads(path.read_text())
        entries = [Entry(**item) for item in data["packages"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot read the embedder's corpus {path}: {exc}") from None
    problems = check_entries(entries)
    if problems:
        raise ValueError(f"{path}: {'; '.join(problems)}")
    return entries


# -------------------------------------------------------------------- download
def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tachy" / "embed-corpus"


def tree_dir(entry: Entry, cache_dir: Path) -> Path:
    """CACHE/NAME-VERSION; CorpusError for a name or version that is no plain word."""
    name = f"{canonical(entry.name)}-{entry.version}"
    if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", name) or ".." in name:
        raise CorpusError(f"{entry.name} {entry.version}: not a name and version to store")
    return cache_dir / name


def _cached(target: Path, entry: Entry) -> bool:
    try:
        return json.loads((target / MARKER).read_text()).get("sha256") == entry.sha256
    except (OSError, ValueError, AttributeError):
        return False


def _fetch(entry: Entry, archive: Path, opener: Opener, timeout: float) -> None:
    """The sdist into `archive`, its sha256 checked while it streams in."""
    label = f"{entry.name} {entry.version}"
    digest, total = hashlib.sha256(), 0
    try:
        with opener(entry.url, timeout=timeout) as response, archive.open("wb") as out:
            while chunk := response.read(1 << 16):
                total += len(chunk)
                if total > MAX_SDIST_BYTES:
                    raise CorpusError(f"{label}: {entry.url} is over {MAX_SDIST_BYTES} bytes")
                digest.update(chunk)
                out.write(chunk)
    except CorpusError:
        raise
    except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
        raise CorpusError(f"{label}: cannot download {entry.url}: {exc}") from None
    if digest.hexdigest() != entry.sha256:
        raise CorpusError(
            f"{label}: the sha256 of {entry.url} is {digest.hexdigest()}, not the recorded "
            f"{entry.sha256}; nothing was kept"
        )


def _extract(entry: Entry, archive: Path, tree: Path) -> dict[str, Any]:
    """The .py files of the sdist into `tree`, paths relative to its top directory.

    Written by hand from each member's bytes (tarfile never writes): a member named
    with an absolute path or `..` fails the package; links, devices and directories
    are never made; a file over MAX_FILE_BYTES is skipped; more than MAX_FILES files or
    MAX_TREE_BYTES bytes fail the package."""
    label = f"{entry.name} {entry.version}"
    files = total = 0
    skipped: Counter[str] = Counter()
    written: set[PurePosixPath] = set()
    tree.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                parts = PurePosixPath(member.name).parts
                if member.name.startswith("/") or ".." in parts:
                    raise CorpusError(
                        f"{label}: {entry.filename} holds {member.name!r}, a path out of "
                        "the package; nothing was kept"
                    )
                if not member.name.endswith(".py"):
                    continue
                if not member.isreg():
                    skipped["not a regular file"] += 1
                    continue
                relative = PurePosixPath(*parts[1:]) if len(parts) > 1 else None
                if relative is None:
                    skipped["outside the top directory"] += 1
                    continue
                if member.size > MAX_FILE_BYTES:
                    skipped["too large"] += 1
                    continue
                if relative in written:
                    skipped["duplicate"] += 1
                    continue
                files, total = files + 1, total + member.size
                if files > MAX_FILES or total > MAX_TREE_BYTES:
                    raise CorpusError(
                        f"{label}: over {MAX_FILES} .py files or {MAX_TREE_BYTES} bytes of them"
                    )
                handle = tar.extractfile(member)
                data = handle.read(MAX_FILE_BYTES + 1) if handle else b""
                dest = tree.joinpath(*relative.parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                written.add(relative)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CorpusError(f"{label}: cannot extract {entry.filename}: {exc}") from None
    return {"files": files, "bytes": total, "skipped": dict(skipped)}


def download(
    entries: Iterable[Entry],
    cache_dir: Path | None = None,
    *,
    opener: Opener | None = None,
    timeout: float = 120.0,
    log: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Each package's tree of .py files: CACHE/NAME-VERSION, fetched and extracted
    unless already there (from the same sha256). The archive is checked against its
    recorded sha256 and extracted in a temporary directory of the cache, which is
    moved into place only when all went well: a failure (CorpusError, naming the
    package) leaves nothing of that package behind."""
    cache_dir = Path(cache_dir or default_cache())
    opener = opener or urllib.request.urlopen
    trees: dict[str, Path] = {}
    for entry in entries:
        target = tree_dir(entry, cache_dir)
        if not _cached(target, entry):
            if log:
                log(f"{entry.name} {entry.version}: downloading {entry.size} bytes")
            cache_dir.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache_dir))
            try:
                archive = work / "sdist.tar.gz"
                _fetch(entry, archive, opener, timeout)
                stats = _extract(entry, archive, work / "tree")
                record = {"name": entry.name, "version": entry.version, "sha256": entry.sha256}
                (work / "tree" / MARKER).write_text(json.dumps({**record, **stats}, indent=1))
                if target.exists():  # another sdist's tree (the entry changed)
                    shutil.rmtree(target)
                try:
                    os.replace(work / "tree", target)
                except OSError as exc:
                    if not _cached(target, entry):  # else: another process got there first
                        raise CorpusError(f"{entry.name} {entry.version}: {exc}") from None
            finally:
                shutil.rmtree(work, ignore_errors=True)
        trees[entry.name] = target
    return trees


def trees_by_role(
    entries: Iterable[Entry] | None = None, cache_dir: Path | None = None, **options: Any
) -> dict[str, list[Path]]:
    """{"train": [...], "dev": [...]}: the packages' source trees (downloaded when
    missing, `download`'s options), by role, in name order."""
    entries = sorted(read_corpus() if entries is None else entries, key=lambda e: e.name)
    trees = download(entries, cache_dir, **options)
    return {role: [trees[e.name] for e in entries if e.role == role] for role in ROLES}


VENDOR_DIRS = frozenset(
    {"_vendor", "vendor", "_vendored", "vendored", "extern", "_extern", "third_party"}
)


def vendored(tree: Path) -> list[str]:
    """Paths in a package's tree that hold a copy of other code: a vendoring directory
    (VENDOR_DIRS), or a directory or module named like an evaluated package. Such a
    package stays out of the corpus (the copy may be of code we evaluate on, and
    would be trained on twice or across the train/dev line otherwise)."""
    found = set()
    for path in tree.rglob("*.py"):
        parts = path.relative_to(tree).parts
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            name = part.removesuffix(".py") if last else part
            if name in EVALUATED_MODULES or (not last and part in VENDOR_DIRS):
                found.add("/".join(parts[: i + 1]))
                break
    return sorted(found)


# --------------------------------------------------------------------- refresh
def _get_json(url: str, opener: Opener, timeout: float) -> dict[str, Any]:
    with opener(url, timeout=timeout) as response:
        return json.loads(response.read())


def _file_url(url: str, base: str) -> str:
    """The file's address on PyPI's file host. (A mirror of PyPI's JSON may give a
    relative link, ".../packages/packages/<hash path>": the same file's canonical
    address is that hash path on the file host.)"""
    absolute = urllib.parse.urljoin(base, url)
    if absolute.startswith(FILES_HOST):
        return absolute
    path = urllib.parse.urlsplit(absolute).path
    if "/packages/" in path:
        rest = path.split("/packages/packages/", 1)[-1] if "/packages/packages/" in path else ""
        if rest:
            return FILES_HOST + rest
    return absolute


def make_entry(spec: str, *, opener: Opener | None = None, timeout: float = 60.0) -> Entry:
    """The entry of "NAME" (its latest release) or "NAME==VERSION" from PyPI's JSON;
    Unconfirmed with the reason when it cannot be used."""
    opener = opener or urllib.request.urlopen
    name, _, pinned = spec.partition("==")
    name = name.strip()
    if canonical(name) in EVALUATED_PACKAGES or canonical(name) in RELATED_PACKAGES:
        raise Unconfirmed("evaluated by a benchmark or test (or a copy of one)")
    url = PYPI_JSON.format(name=name)
    try:
        meta = _get_json(url, opener, timeout)
        if pinned and meta["info"]["version"] != pinned:
            url = PYPI_VERSION_JSON.format(name=name, version=pinned)
            meta = _get_json(url, opener, timeout)
    except (OSError, ValueError) as exc:
        raise Unconfirmed(f"no metadata from {url}: {exc}") from None
    info = meta["info"]
    version = info["version"]
    if not _PINNED.match(version):
        raise Unconfirmed(f"its release {version} is not a final one")
    license, source = declared_license(info)
    sdists = [
        u
        for u in meta.get("urls") or []
        if u.get("packagetype") == "sdist"
        and u["filename"].endswith(".tar.gz")
        and not u.get("yanked")
    ]
    if len(sdists) != 1:
        raise Unconfirmed(f"{len(sdists)} .tar.gz source distributions of {version}")
    sdist = sdists[0]
    if sdist["size"] > MAX_SDIST_BYTES:
        raise Unconfirmed(f"its sdist is {sdist['size']} bytes")
    return Entry(
        name=info["name"],
        version=version,
        license=license,
        license_from=source,
        role=role_of(info["name"]),
        filename=sdist["filename"],
        url=_file_url(sdist["url"], url),
        size=sdist["size"],
        sha256=sdist["digests"]["sha256"],
    )


def installed() -> set[str]:
    """The distributions of the running environment (canonical names)."""
    from importlib.metadata import distributions

    return {canonical(d.metadata["Name"] or "") for d in distributions()}


def refresh(
    specs: Iterable[str] = PACKAGES,
    path: Path = CORPUS_FILE,
    *,
    cache_dir: Path | None = None,
    opener: Opener | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Rebuild the corpus file from `specs` ("NAME" or "NAME==VERSION"): each one's
    metadata from PyPI, then its sdist downloaded and checked (`download`); a package
    that breaks a rule of the list is left out, with the reason recorded."""
    entries: list[Entry] = []
    left_out: dict[str, str] = {}
    present = installed()
    for spec in specs:
        name = spec.partition("==")[0].strip()
        try:
            if canonical(name) in present:
                raise Unconfirmed("installed in tachy's environment (a tree a benchmark can use)")
            entries.append(make_entry(spec, opener=opener))
        except Unconfirmed as exc:
            left_out[name] = str(exc)
            log(f"left out {name}: {exc}")
    trees = download(entries, cache_dir, opener=opener, log=log)
    kept = []
    for entry in entries:
        copies = vendored(trees[entry.name])
        if copies:
            left_out[entry.name] = f"holds a copy of an evaluated package: {', '.join(copies)}"
            log(f"left out {entry.name}: {left_out[entry.name]}")
        elif not any(trees[entry.name].rglob("*.py")):
            left_out[entry.name] = "no .py files in its sdist"
        else:
            kept.append(entry)
    kept.sort(key=lambda e: canonical(e.name))
    problems = check_entries(kept)
    if problems:
        raise CorpusError("; ".join(problems))
    data = {
        "source": "source distributions from PyPI (training.embed.corpus)",
        "rule": f"a package is for development when crc32(name) % {DEV_MODULUS} == 0",
        "licenses": "MIT, BSD, Apache-2.0, PSF, ISC, as each package's metadata declares",
        "fields": [f.name for f in fields(Entry)],
        "packages": [asdict(e) for e in kept],
        "left_out": dict(sorted(left_out.items())),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.embed.corpus", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--refresh", action="store_true", help="rebuild the corpus file")
    action.add_argument("--download", action="store_true", help="fill the cache")
    parser.add_argument("--cache", type=Path, default=None, help="default: " + str(default_cache()))
    options = parser.parse_args(argv)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if options.refresh:
            data = refresh(cache_dir=options.cache, log=log)
            roles = Counter(p["role"] for p in data["packages"])
            size = sum(p["size"] for p in data["packages"])
            log(
                f"{CORPUS_FILE}: {roles['train']} training, {roles['dev']} development "
                f"packages ({size} bytes of sdists), {len(data['left_out'])} left out"
            )
        else:
            trees = trees_by_role(cache_dir=options.cache, log=log)
            log(", ".join(f"{len(v)} {k} trees" for k, v in trees.items()))
    except ValueError as exc:
        log(f"tachy: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
