"""Web pages to replay: synthetic pages with realistic mixes, named pages, and HAR imports.

A :class:`Page` is a tree of :class:`WebObject` s rooted at one HTML document. Each object has
a parent (the object whose content references it: the HTML links stylesheets, scripts and
images; a stylesheet references fonts and background images; a script inserts further
scripts and images when it runs) and a depth (the HTML is 0). :meth:`Page.materialize`
writes real files of exactly the stated sizes, so a browser has to discover the
dependencies level by level as on a real page.

A user's own folder (``dir:PATH[@INDEX]``, :class:`DirectoryPage`) is served as it is: every
visible file at its path under the folder, a load starting at INDEX (default ``index.html``).

Synthetic pages (:func:`generate_page`) draw object types and sizes from distributions shaped
like the HTTP Archive's mobile crawl (rounded values; see ``KIND_MIX`` and ``SIZE_LOGNORMAL``),
then scale the sizes to the requested page total.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import quote, urlsplit

from clawbed.errors import InputError
from clawbed.files import atomic_write
from clawbed.replay import content, mahimahi
from clawbed.replay.mahimahi import RecordedPage

Kind = Literal["html", "css", "js", "image", "font"]
KINDS: tuple[Kind, ...] = ("html", "css", "js", "image", "font")

#: Share of a page's subresources (everything but the main HTML) by type. Rounded from the
#: HTTP Archive mobile medians (Web Almanac 2022, "Page Weight": about 25 images, 21
#: scripts, 7 stylesheets and 3 fonts per page).
KIND_MIX: dict[Kind, float] = {"image": 0.45, "js": 0.37, "css": 0.12, "font": 0.06}

#: Object sizes before scaling to the page total: lognormal with this median (bytes) and
#: sigma (of the natural log). Medians are rounded HTTP Archive per-request medians for each
#: type; the sigmas give the long tails seen there (a few images and bundles dominate a page).
SIZE_LOGNORMAL: dict[Kind, tuple[float, float]] = {
    "html": (30_000, 0.9),
    "css": (8_000, 1.1),
    "js": (20_000, 1.3),
    "image": (12_000, 1.6),
    "font": (25_000, 0.5),
}

#: Smallest size of a generated object by type, bytes (real pages have tiny images and
#: scripts, but below these the replay would only measure request overhead). Text objects
#: are also at least as large as the markup that references their children.
MIN_BYTES: dict[Kind, int] = {"html": 2048, "css": 512, "js": 512, "image": 1024, "font": 4096}

#: Which parent types each type may have in a materialized page (what a browser can be made
#: to fetch from that parent's content).
ALLOWED_PARENTS: dict[Kind, tuple[Kind, ...]] = {
    "html": ("html", "js"),  # an iframe
    "css": ("html", "css", "js"),  # <link>, @import, an inserted <link>
    "js": ("html", "js"),  # <script>, an inserted <script>
    "image": ("html", "css", "js"),  # <img>, background-image, an inserted <img>
    "font": ("html", "css", "js"),  # inline @font-face, @font-face, an inserted <style>
}

#: Share of JPEG among generated images (the rest are PNG); HTTP Archive counts more JPEG
#: than PNG requests.
JPEG_SHARE = 0.6


@dataclass
class WebObject:
    """One file of a page: its URL path, type, size (bytes), referencing object and depth."""

    path: str
    kind: Kind
    size_bytes: int
    parent: str | None
    depth: int


@dataclass
class Page:
    """A page: ``objects[0]`` is the main HTML; parents come before their children."""

    name: str
    objects: list[WebObject]
    seed: int

    def __post_init__(self) -> None:
        if not self.objects:
            raise InputError(f"page {self.name}: no objects")
        root = self.objects[0]
        if root.kind != "html" or root.parent is not None or root.depth != 0:
            raise InputError(f"page {self.name}: the first object must be the HTML at depth 0 "
                             f"without a parent (got {root.kind} {root.path})")
        seen: dict[str, WebObject] = {}
        for obj in self.objects:
            if obj.kind not in KINDS:
                raise InputError(f"page {self.name}: object {obj.path}: kind {obj.kind!r} is not one of {KINDS}")
            if obj.path in seen:
                raise InputError(f"page {self.name}: object path {obj.path} appears twice")
            if not obj.path.startswith("/"):
                raise InputError(f"page {self.name}: object path {obj.path!r} must start with /")
            if obj.size_bytes <= 0:
                raise InputError(f"page {self.name}: object {obj.path}: size_bytes must be positive")
            if obj is not root:
                parent = seen.get(obj.parent or "")
                if parent is None:
                    raise InputError(f"page {self.name}: object {obj.path}: parent {obj.parent} "
                                     "is not an earlier object of the page")
                if parent.kind not in ALLOWED_PARENTS[obj.kind]:
                    raise InputError(f"page {self.name}: object {obj.path}: a {obj.kind} cannot "
                                     f"be referenced by a {parent.kind}")
                if obj.depth != parent.depth + 1:
                    raise InputError(f"page {self.name}: object {obj.path}: depth {obj.depth} "
                                     f"is not its parent's depth + 1")
            seen[obj.path] = obj

    @property
    def total_bytes(self) -> int:
        """Sum of all objects' sizes, bytes (what a full load transfers in bodies)."""
        return sum(o.size_bytes for o in self.objects)

    @property
    def max_depth(self) -> int:
        """The deepest dependency level (1: everything is referenced by the HTML)."""
        return max(o.depth for o in self.objects)

    @property
    def required_bytes(self) -> int:
        """The body bytes a complete load fetches: every object's (a recorded page's may be fewer)."""
        return self.total_bytes

    @property
    def root(self) -> WebObject:
        return self.objects[0]

    def children(self, path: str) -> list[WebObject]:
        """Objects whose parent is ``path``, in page order."""
        return [o for o in self.objects if o.parent == path]

    def manifest(self) -> dict:
        """The page as JSON-able data (what ``manifest.json`` holds)."""
        return {"name": self.name, "seed": self.seed, "total_bytes": self.total_bytes,
                "n_objects": len(self.objects), "max_depth": self.max_depth,
                "objects": [asdict(o) for o in self.objects]}

    def render(self, obj: WebObject, size_bytes: int | None) -> bytes:
        """The file content of ``obj``, exactly ``size_bytes`` long; ``None`` (text objects
        only): the smallest content that holds its references."""
        rng = random.Random(f"{self.seed}:{obj.path}")
        children = self.children(obj.path)
        if obj.kind == "html":
            return content.html_bytes(obj, children, self._hooks(obj), f"clawbed {self.name}", size_bytes, rng)
        if obj.kind == "css":
            return content.css_bytes(obj, children, size_bytes, rng)
        if obj.kind == "js":
            return content.js_bytes(obj, children, size_bytes, rng)
        if size_bytes is None:
            raise ValueError("binary objects have no natural size")
        if obj.kind == "image":
            return content.image_bytes(obj, size_bytes, rng)
        return content.font_bytes(obj, size_bytes, rng)

    def needed_bytes(self, obj: WebObject) -> int:
        """The smallest size ``obj`` can have: its references (text) or the bare format (binary)."""
        if obj.kind == "image":
            return content.image_min_bytes(obj.path)
        if obj.kind == "font":
            return content.font_min_bytes()
        return len(self.render(obj, None))

    def _hooks(self, doc: WebObject) -> content.Hooks:
        """Hook elements ``doc`` needs for images and fonts referenced by stylesheets it loads
        (directly, through @import, or through scripts that insert them)."""
        hooks = content.Hooks()
        for obj in self.objects:
            parent = self._by_path(obj.parent)
            if parent is None or parent.kind != "css" or obj.kind not in ("image", "font"):
                continue
            if self._document_of(parent).path != doc.path:
                continue
            target = hooks.background_classes if obj.kind == "image" else hooks.font_classes
            target.append(content.css_class(obj))
        return hooks

    def _by_path(self, path: str | None) -> WebObject | None:
        return next((o for o in self.objects if o.path == path), None)

    def _document_of(self, obj: WebObject) -> WebObject:
        """The nearest HTML ancestor of ``obj`` (the document its elements live in)."""
        parent = self._by_path(obj.parent)
        while parent is not None and parent.kind != "html":
            parent = self._by_path(parent.parent)
        return parent or self.root

    def materialize(self, site_dir: Path) -> Path:
        """Write every object under ``site_dir`` (at its URL path) and ``manifest.json``;
        return the manifest's path. The objects' files sum to :attr:`total_bytes`."""
        site_dir.mkdir(parents=True, exist_ok=True)
        for obj in self.objects:
            path = site_dir / obj.path.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.render(obj, obj.size_bytes))
        manifest = site_dir / "manifest.json"
        with atomic_write(manifest, "w") as f:
            json.dump(self.manifest(), f, indent=1)
        return manifest


@dataclass(frozen=True)
class PageSpec:
    """A named page: its total size (bytes), object count (the HTML included), deepest
    dependency level, and what it stands for."""

    name: str
    total_bytes: int
    n_objects: int
    max_depth: int
    description: str


KIB = 1024
MIB = 1024 * 1024

#: The 2 MB image of the CLAW paper's micro-benchmark (§6.1): a bare-bones page of 1 KiB
#: HTML and one 2 MiB image.
IMAGE_2MB_IMAGE_BYTES = 2 * MIB
IMAGE_2MB_HTML_BYTES = 1 * KIB

#: The 20-page set spanning size × object count, like the CLAW paper's Fig. 16 (Alexa top-200
#: pages, no small pages with many objects) and the 56 KB–4.7 MB, 5–323-object range of the
#: SPDY study's Table 1: (total KiB, objects, max depth).
_SET: tuple[tuple[int, int, int], ...] = (
    (100, 8, 2), (250, 15, 2), (250, 40, 3), (500, 20, 2), (500, 60, 3),
    (750, 35, 3), (750, 90, 3), (1000, 50, 3), (1000, 120, 4), (1250, 70, 3),
    (1500, 40, 3), (1500, 150, 4), (2000, 60, 3), (2000, 180, 4), (2500, 100, 4),
    (3000, 80, 3), (3000, 220, 4), (4000, 130, 4), (4500, 250, 4), (5000, 160, 4),
)

NAMED_PAGES: dict[str, PageSpec] = {
    "image-2mb": PageSpec("image-2mb", IMAGE_2MB_HTML_BYTES + IMAGE_2MB_IMAGE_BYTES, 2, 1,
                          "bare-bones HTML with one 2 MiB image (CLAW §6.1 micro-benchmark)"),
    "profile": PageSpec("profile", 1300 * KIB, 68, 3,
                        "a typical profile page (CLAW §6.2.2): 1.3 MiB, 68 objects"),
    **{f"set-{i + 1:02d}": PageSpec(f"set-{i + 1:02d}", kib * KIB, n, depth,
                                     f"page {i + 1} of the 20-page set: {kib} KiB, {n} objects")
       for i, (kib, n, depth) in enumerate(_SET)},
}


# -- a user's own folder ------------------------------------------------------------------------

#: The prefix of a page name that is a user's folder: ``dir:PATH`` or ``dir:PATH@INDEX``.
DIR_PREFIX = "dir:"
#: The file a load of a folder starts at unless ``@INDEX`` names another.
DEFAULT_INDEX = "index.html"
#: File a materialized directory page is described by (read by :mod:`clawbed.replay.webserver`):
#: the sub-folder the folder's copy is served from, so the user's own files (a ``manifest.json``
#: of theirs) never meet the run's.
DIRECTORY_INDEX = "directory-site.json"
DIRECTORY_FORMAT = "clawbed-directory-site/1"
#: Sub-folder of the site directory holding the copy of the user's folder.
DIRECTORY_DOCROOT = "files"

#: File types by extension, for the manifest and the reports (anything else is ``other``).
_DIR_KINDS = {"html": "html", "htm": "html", "css": "css", "js": "js", "mjs": "js",
              "png": "image", "jpg": "image", "jpeg": "image", "gif": "image", "webp": "image",
              "avif": "image", "svg": "image", "ico": "image",
              "woff": "font", "woff2": "font", "ttf": "font", "otf": "font"}


@dataclass
class DirectoryFile:
    """One file of a user's folder: its URL path (percent-encoded), type by extension, size
    (bytes), the file it is copied from and the SHA-256 of its content (what was served)."""

    path: str
    kind: str
    size_bytes: int
    source: Path
    sha256: str


@dataclass
class DirectoryPage:
    """A user's folder as a page: ``objects[0]`` is the index (where a load starts), the rest in
    path order. Offers what the replay uses of :class:`Page`."""

    name: str
    directory: Path
    objects: list[DirectoryFile]
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def root(self) -> DirectoryFile:
        return self.objects[0]

    @property
    def total_bytes(self) -> int:
        """Sum of every file's size, bytes (a load fetches those its index references)."""
        return sum(o.size_bytes for o in self.objects)

    @property
    def required_bytes(self) -> int:
        """The least a complete load fetches: the index (a folder may hold files no page uses)."""
        return self.root.size_bytes

    def manifest(self) -> dict:
        return {"name": self.name, "directory": str(self.directory), "root": self.root.path,
                "total_bytes": self.total_bytes, "required_bytes": self.required_bytes,
                "n_objects": len(self.objects), "notes": self.notes,
                "objects": [{**asdict(o), "source": str(o.source)} for o in self.objects]}

    def materialize(self, site_dir: Path) -> Path:
        """Copy every file under ``site_dir/files`` at its path (what the run served stays with
        the run, whatever happens to the folder later), write :data:`DIRECTORY_INDEX` and
        ``manifest.json``; return the manifest's path. A file that changed since it was read is
        an error naming it."""
        site_dir = Path(site_dir)
        docroot = site_dir / DIRECTORY_DOCROOT
        for obj in self.objects:
            relative = obj.source.relative_to(self.directory)
            target = docroot / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(obj.source, target)
            except OSError as e:
                raise InputError(f"--page {self.name}: copying {obj.source}: {e.strerror or e}") from None
            if _sha256(target) != obj.sha256:
                raise InputError(f"--page {self.name}: {obj.source} changed while the run was starting")
        with atomic_write(site_dir / DIRECTORY_INDEX, "w") as f:
            json.dump({"format": DIRECTORY_FORMAT, "docroot": DIRECTORY_DOCROOT, "root": self.root.path}, f,
                      indent=1)
        manifest = site_dir / "manifest.json"
        with atomic_write(manifest, "w") as f:
            json.dump(self.manifest(), f, indent=1)
        return manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def directory_page(spec: str) -> DirectoryPage:
    """``PATH`` or ``PATH@INDEX`` (the part of a page name after ``dir:``) → the page: every
    visible regular file under PATH (hidden files and folders, e.g. ``.git``, are left out);
    INDEX, a path relative to PATH, is where a load starts (default :data:`DEFAULT_INDEX`) and
    must be an HTML file. Errors name the path."""
    index = DEFAULT_INDEX
    at = spec.rfind("@")
    if at >= 0 and not Path(spec).expanduser().exists():
        spec, index = spec[:at], spec[at + 1:]
    if not spec:
        raise InputError(f"--page {DIR_PREFIX}: give the folder to serve ({DIR_PREFIX}PATH or {DIR_PREFIX}PATH@INDEX)")
    directory = Path(spec).expanduser().resolve()
    name = f"{DIR_PREFIX}{spec}" + (f"@{index}" if index != DEFAULT_INDEX else "")
    if not directory.exists():
        raise InputError(f"--page {name}: {directory}: no such folder")
    if not directory.is_dir():
        raise InputError(f"--page {name}: {directory} is not a folder")
    index_rel = PurePosixPath(index.lstrip("/"))
    if not index or ".." in index_rel.parts:
        raise InputError(f"--page {name}: INDEX {index!r} must be a file inside {directory}")
    files: list[Path] = []
    for top, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(top) / n for n in sorted(names) if not n.startswith(".") and (Path(top) / n).is_file()]
    if not files:
        raise InputError(f"--page {name}: {directory} holds no files to serve (hidden ones are left out)")
    root_file = directory / index_rel
    if root_file not in files:
        raise InputError(f"--page {name}: {directory} has no index {index_rel} "
                         f"(give {DIR_PREFIX}{spec}@INDEX to start at another file)")
    objects: list[DirectoryFile] = []
    for path in [root_file] + [f for f in files if f != root_file]:
        relative = path.relative_to(directory).as_posix()
        try:
            size = path.stat().st_size
            digest = _sha256(path)
        except OSError as e:
            raise InputError(f"--page {name}: reading {path}: {e.strerror or e}") from None
        kind = _DIR_KINDS.get(relative.rsplit(".", 1)[-1].lower() if "." in relative else "", "other")
        objects.append(DirectoryFile("/" + quote(relative), kind, size, path, digest))
    if objects[0].kind != "html":
        raise InputError(f"--page {name}: the index {index_rel} is not an HTML file (.html or .htm), "
                         "so a browser would not load a page from it")
    empty = [o.path for o in objects if o.size_bytes == 0]
    notes = [f"empty file(s): {', '.join(empty[:5])}"] if empty else []
    return DirectoryPage(name, directory, objects, notes=notes)


def get_page(name: str, seed: int = 1) -> Page | RecordedPage | DirectoryPage:
    """The named page; ``seed`` varies the drawn objects (sizes and counts stay those of the name).
    ``mahimahi:DIR`` (or ``mahimahi:DIR@URL``): the site recorded by Mahimahi's ``mm-webrecord`` in
    folder DIR (:mod:`clawbed.replay.mahimahi`; ``seed`` plays no part). ``dir:PATH`` (or
    ``dir:PATH@INDEX``): a user's folder of files (:func:`directory_page`; ``seed`` plays no part)."""
    if name.startswith(mahimahi.PREFIX):
        return mahimahi.page_from_spec(name[len(mahimahi.PREFIX):])
    if name.startswith(DIR_PREFIX):
        return directory_page(name[len(DIR_PREFIX):])
    spec = NAMED_PAGES.get(name)
    if spec is None:
        raise InputError(f"unknown page {name!r}; named pages: {', '.join(NAMED_PAGES)}, "
                         f"{mahimahi.PREFIX}DIR (a Mahimahi recording) or {DIR_PREFIX}PATH[@INDEX] (a folder of "
                         "your own files)")
    if name == "image-2mb":
        return Page(name, [WebObject("/index.html", "html", IMAGE_2MB_HTML_BYTES, None, 0),
                           WebObject("/image/001.jpg", "image", IMAGE_2MB_IMAGE_BYTES, "/index.html", 1)],
                    seed)
    return generate_page(spec.total_bytes, spec.n_objects, spec.max_depth, seed, name=name)


def document_protocol(page: Page | RecordedPage | DirectoryPage, http_version: str) -> str:
    """The protocol (ALPN-style: ``h2``, ``http/1.1``) a load of ``page`` fetches its document
    over when nginx offers HTTP ``http_version`` over TLS: a recorded site whose document is
    ``http://`` is plain HTTP/1.1 whatever is offered on TLS."""
    if isinstance(page, RecordedPage):
        doc = page.document(page.root)
        if doc is not None and doc.scheme == "http":
            return "http/1.1"
    return "h2" if http_version == "2" else "http/1.1"


def describe_protocol(page: Page | RecordedPage | DirectoryPage, http_version: str) -> str:
    """What a run's header says of its protocol: the document's, and over what."""
    protocol = document_protocol(page, http_version)
    if isinstance(page, RecordedPage):
        doc = page.document(page.root)
        if doc is not None and doc.scheme == "http":
            return f"HTTP/1.1 over plain HTTP (the recorded document is {doc.path}; --http applies to https:// only)"
    return ("HTTP/2" if protocol == "h2" else "HTTP/1.1") + " over TLS"


def _path(kind: Kind, number: int, rng: random.Random) -> str:
    if kind == "image":
        ext = "jpg" if rng.random() < JPEG_SHARE else "png"
    else:
        ext = {"html": "html", "css": "css", "js": "js", "font": "woff"}[kind]
    return f"/{kind}/{number:03d}.{ext}"


def generate_page(total_bytes: int, n_objects: int, max_depth: int, seed: int,
                  name: str | None = None) -> Page:
    """A synthetic page of ``n_objects`` objects (the HTML included) summing to exactly
    ``total_bytes``, dependency levels 1..``max_depth``, reproducible by ``seed``.

    Types come from :data:`KIND_MIX`; parents: stylesheets are linked by the HTML; scripts by
    the HTML (70 %) or inserted by an earlier script (30 %); fonts by a stylesheet; images by
    the HTML (60 %), a stylesheet (15 %) or a script (25 %) — only parents above
    ``max_depth`` qualify. Sizes are drawn from :data:`SIZE_LOGNORMAL` and scaled together
    to the total (objects that would fall below :data:`MIN_BYTES` or their markup are held
    there).
    """
    if n_objects < 1:
        raise InputError(f"n_objects must be at least 1 (got {n_objects})")
    if n_objects > 1 and max_depth < 1:
        raise InputError(f"max_depth must be at least 1 for a page with subresources (got {max_depth})")
    name = name or f"gen-{total_bytes}-{n_objects}-{max_depth}"
    # The name joins the seed so two named pages of the same object count differ in structure.
    rng = random.Random(f"{name}:{seed}")
    names = list(KIND_MIX)
    kinds: list[Kind] = rng.choices(names, weights=[KIND_MIX[k] for k in names], k=n_objects - 1)
    if max_depth < 2:
        # Fonts need a stylesheet (depth 2): with one level only, they become images.
        kinds = ["image" if k == "font" else k for k in kinds]
    if "font" in kinds and "css" not in kinds:
        kinds[kinds.index("font")] = "css"
    # Parents are chosen in this order so every candidate parent exists first.
    order = {"css": 0, "js": 1, "font": 2, "image": 3}
    drafted: list[tuple[Kind, int, int]] = []  # (kind, parent index into drafted or -1, depth)

    def pick(candidates: list[tuple[float, Kind]]) -> tuple[int, int]:
        """(parent index into ``drafted`` or -1 for the HTML, depth): a parent kind by weight
        among those with an object above ``max_depth``, then one such object uniformly."""
        pools = [(weight, [i for i, (k, _, d) in enumerate(drafted) if k == kind and d < max_depth])
                 for weight, kind in candidates if kind != "html"]
        pools = [(weight, ids) for weight, ids in pools if ids]
        html_weight = sum(weight for weight, kind in candidates if kind == "html")
        options: list[tuple[float, list[int]]] = [(html_weight, [-1])] if html_weight else []
        options += pools
        if not options:
            return -1, 1
        _, ids = rng.choices(options, weights=[w for w, _ in options])[0]
        i = rng.choice(ids)
        return (-1, 1) if i < 0 else (i, drafted[i][2] + 1)

    for kind in sorted(kinds, key=lambda k: order[k]):
        if kind == "css":
            parent, depth = -1, 1
        elif kind == "js":
            parent, depth = (-1, 1) if rng.random() < 0.7 else pick([(1.0, "js")])
        elif kind == "font":
            parent, depth = pick([(1.0, "css")])
        else:
            parent, depth = pick([(0.60, "html"), (0.15, "css"), (0.25, "js")])
        drafted.append((kind, parent, depth))
    # Objects in page order: by level, then in drafting order; numbered in that order.
    order_idx = sorted(range(len(drafted)), key=lambda i: (drafted[i][2], i))
    paths = {i: _path(drafted[i][0], n + 1, rng) for n, i in enumerate(order_idx)}
    root_path = "/index.html"
    objects = [WebObject(root_path, "html", 1, None, 0)]
    for i in order_idx:
        kind, parent, depth = drafted[i]
        objects.append(WebObject(paths[i], kind, 1, paths[parent] if parent >= 0 else root_path, depth))
    page = Page(name, objects, seed)

    raw = [rng.lognormvariate(math.log(SIZE_LOGNORMAL[o.kind][0]), SIZE_LOGNORMAL[o.kind][1])
           for o in objects]
    floors = [max(MIN_BYTES[o.kind], page.needed_bytes(o) if o.kind in ("html", "css", "js") else 0)
              for o in objects]
    for obj, size in zip(objects, _scale_to_total(raw, floors, total_bytes)):
        obj.size_bytes = size
    return page


def _scale_to_total(raw: list[float], floors: list[int], total_bytes: int) -> list[int]:
    """Integer sizes proportional to ``raw``, each at least its floor, summing to ``total_bytes``."""
    if sum(floors) > total_bytes:
        raise InputError(f"total_bytes={total_bytes} is below the smallest page of {len(raw)} "
                         f"objects ({sum(floors)} bytes)")
    held: set[int] = set()
    while True:
        free = [i for i in range(len(raw)) if i not in held]
        budget = total_bytes - sum(floors[i] for i in held)
        factor = budget / sum(raw[i] for i in free)
        below = {i for i in free if raw[i] * factor < floors[i]}
        if not below:
            break
        held |= below
    sizes = [floors[i] if i in held else max(floors[i], int(raw[i] * factor)) for i in range(len(raw))]
    # Rounding down left a few bytes: the largest object takes them.
    sizes[max(range(len(sizes)), key=lambda i: sizes[i])] += total_bytes - sum(sizes)
    return sizes


# --- HAR import ---------------------------------------------------------------------------

def _field(obj: object, path: str, where: str) -> object:
    """``obj[a][b]…`` for ``path`` "a.b…", or an InputError naming ``where.path``."""
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            raise InputError(f"HAR {where}.{path}: missing")
        obj = obj[key]
    return obj


def _kind_of(mime: str, url: str) -> Kind:
    """An object type from its MIME type, else its URL's extension; anything else (JSON,
    media, beacons) is replayed as an image of the same size (an <img> fetch of its bytes)."""
    mime = mime.split(";")[0].strip().lower()
    ext = urlsplit(url).path.rsplit(".", 1)[-1].lower()
    if mime in ("text/html", "application/xhtml+xml") or ext in ("html", "htm"):
        return "html"
    if mime == "text/css" or ext == "css":
        return "css"
    if "javascript" in mime or "ecmascript" in mime or ext in ("js", "mjs"):
        return "js"
    if mime.startswith("font/") or "font" in mime or ext in ("woff", "woff2", "ttf", "otf"):
        return "font"
    return "image"


def _initiator_url(entry: dict) -> str | None:
    """The URL that caused a request (Chrome's ``_initiator``: its ``url``, else the top frame
    of its script ``stack``)."""
    initiator = entry.get("_initiator")
    if not isinstance(initiator, dict):
        return None
    if isinstance(initiator.get("url"), str):
        return initiator["url"]
    stack = initiator.get("stack")
    while isinstance(stack, dict):
        frames = stack.get("callFrames") or []
        if frames and isinstance(frames[0], dict) and frames[0].get("url"):
            return frames[0]["url"]
        stack = stack.get("parent")
    return None


def page_from_har(path: Path, name: str | None = None) -> Page:
    """A page with the objects of a HAR file: same order, types and sizes.

    Kept entries: successful (2xx) responses to http(s) URLs. Size: ``response.bodySize``
    (bytes on the wire), or ``response.content.size`` when the body size is unknown (-1),
    raised to the smallest valid file of the type when below it. Parent: the entry's
    ``_initiator`` (Chrome HARs) when it is an earlier object that may reference this type
    (else its nearest such ancestor), otherwise the main document. Every object is served
    from one origin, as the CLAW paper's replay server did.
    """
    try:
        har = json.loads(Path(path).read_text())
    except OSError as e:
        raise InputError(f"cannot read HAR {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise InputError(f"HAR {path}: not JSON ({e.msg} at line {e.lineno})") from e
    entries = _field(har, "log.entries", str(path))
    if not isinstance(entries, list) or not entries:
        raise InputError(f"HAR {path}: log.entries must be a non-empty list")
    objects: list[WebObject] = []
    by_url: dict[str, WebObject] = {}
    numbers = {k: 0 for k in KINDS}
    for n, entry in enumerate(entries):
        where = f"{path}: log.entries[{n}]"
        url = _field(entry, "request.url", where)
        status = _field(entry, "response.status", where)
        if not isinstance(url, str):
            raise InputError(f"HAR {where}.request.url: not a string")
        if not isinstance(status, int):
            raise InputError(f"HAR {where}.response.status: not an integer")
        if not url.startswith(("http://", "https://")) or not 200 <= status < 300:
            continue
        mime = _field(entry, "response.content.mimeType", where)
        body = _field(entry, "response.bodySize", where)
        if not isinstance(mime, str):
            raise InputError(f"HAR {where}.response.content.mimeType: not a string")
        if not isinstance(body, int):
            raise InputError(f"HAR {where}.response.bodySize: not an integer")
        size = body
        if size < 0:
            content_size = _field(entry, "response.content.size", where)
            if not isinstance(content_size, int) or content_size < 0:
                raise InputError(f"HAR {where}.response.content.size: not a byte count "
                                 "(and response.bodySize is unknown)")
            size = content_size
        kind = _kind_of(mime, url)
        if not objects:
            if kind != "html":
                raise InputError(f"HAR {where}.response.content.mimeType: the first kept entry "
                                 f"must be the HTML document (got {mime!r})")
            obj = WebObject("/index.html", "html", max(size, 1), None, 0)
        else:
            parent = by_url.get(_initiator_url(entry) or "")
            while parent is not None and parent.kind not in ALLOWED_PARENTS[kind]:
                parent = next(o for o in objects if o.path == parent.parent) if parent.parent else None
            parent = parent or objects[0]
            numbers[kind] += 1
            ext = {"html": "html", "css": "css", "js": "js", "font": "woff",
                   "image": "png" if "png" in mime else "jpg"}[kind]
            # Sizes below 1 byte are raised with the other floors once the page exists.
            obj = WebObject(f"/{kind}/{numbers[kind]:03d}.{ext}", kind, max(size, 1), parent.path,
                            parent.depth + 1)
        objects.append(obj)
        by_url.setdefault(url, obj)
    if not objects:
        raise InputError(f"HAR {path}: log.entries has no successful http(s) response")
    page = Page(name or Path(path).stem, objects, seed=0)
    for obj in page.objects:
        obj.size_bytes = max(obj.size_bytes, page.needed_bytes(obj))
    return page
