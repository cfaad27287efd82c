"""Dump the desktop's AT-SPI accessibility tree as OSWorld-style XML (run as a script in the desktop's env).

Run by `DesktopSession.accessibility_tree` as `python a11y.py [--max-nodes N]` with DISPLAY and
DBUS_SESSION_BUS_ADDRESS of the desktop, so pyatspi's process-global bus connection belongs to one desktop
and a hung app cannot wedge the caller. Prints the XML on stdout. Needs Debian's pyatspi (python3-pyatspi;
the interpreter must see Debian's dist-packages: a venv with --system-site-packages).

Format (as OSWorld's VM server writes it for Ubuntu): root <desktop-frame>, one element per accessible,
tag = role name with spaces as '-', attribute `name`, states as st:NAME="true", object attributes as
attr:KEY, component as cp:screencoord="(x, y)" and cp:size="(w, h)", value as val:value, text as element
text. Only nodes with the `showing` state (on screen) are listed unless --all. `focused` is kept on the
deepest focused nodes only: LibreOffice leaves it set on the window's root pane for a while after focus moved
into the sheet, so two runs of the same actions differed in that attribute alone (measured: a replayed
Calc step); the node that has the focus is still marked. Bounds: at most --max-nodes elements, depth 50, 200
children per node; tables with huge child counts (Calc's sheet reports 2^31-1) are walked through
queryTable() over the visible cell range only.
"""

from __future__ import annotations

import argparse
import sys

NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
MAX_DEPTH = 50
MAX_CHILDREN = 200
MAX_TABLE_ROWS = 60
MAX_TABLE_COLS = 30
MAX_TEXT = 2000


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:
        return default


_SKIP = object()


class Dumper:
    def __init__(self, pyatspi, max_nodes: int, only_showing: bool = True):
        from lxml import etree
        from gi.repository import Atspi
        self.pyatspi, self.Atspi = pyatspi, Atspi
        self.etree = etree
        acc = Atspi.Accessible
        self.ifaces = (acc.get_component_iface, acc.get_text_iface, acc.get_value_iface)
        self.max_nodes = max_nodes
        self.only_showing = only_showing
        self.count = 0

    def tag(self, node) -> str:
        role = _safe(node.getRoleName, "unknown") or "unknown"
        tag = "".join(c if (c.isalnum() or c in "-_") else "-" for c in role.replace(" ", "-"))
        return tag if tag and not tag[0].isdigit() else "node-" + tag

    def interfaces(self, node) -> tuple:
        """The node's Component, Text and Value interfaces (None for each it lacks)."""
        return tuple(_safe(lambda f=f: f(node)) for f in self.ifaces)

    def element(self, node, depth: int, interfaces_first: bool = False):
        """The node as an element; None when the node cap is reached; _SKIP for a node not on screen.

        `interfaces_first`: ask which interfaces the node has before its states. libatspi answers later
        interface checks from one GetInterfaces reply, except for a node whose states say transient (Calc's
        cells): asking first spares two round trips per cell; asking a node that turns out hidden costs one."""
        if self.count >= self.max_nodes:
            return None
        pyatspi, Atspi = self.pyatspi, self.Atspi
        if interfaces_first:
            comp, text, val = self.interfaces(node)
        states = _safe(lambda: node.getState().getStates(), []) or []
        names = [n for n in (_safe(lambda: pyatspi.stateToString(st), None) for st in states) if n]
        if self.only_showing and depth > 1 and "showing" not in names:
            return _SKIP  # e.g. the items of closed menus: thousands of nodes nobody can see
        if not interfaces_first:
            comp, text, val = self.interfaces(node)
        self.count += 1
        el = self.etree.Element(self.tag(node), nsmap=NS)
        name = _safe(lambda: node.get_name(), "") or ""
        el.set("name", name)
        for s in names:
            el.set(f"{{{NS['st']}}}{s.replace(' ', '-')}", "true")
        for kv in _safe(node.get_attributes_as_array, []) or []:
            if ":" in kv:
                k, v = kv.split(":", 1)
                k = "".join(c for c in k if c.isalnum() or c in "-_")
                if k and not k[0].isdigit():
                    el.set(f"{{{NS['attr']}}}{k}", v)
        if comp:
            ext = _safe(lambda: Atspi.Component.get_extents(node, Atspi.CoordType.SCREEN))
            if ext is not None:
                el.set(f"{{{NS['cp']}}}screencoord", f"({ext.x}, {ext.y})")
                el.set(f"{{{NS['cp']}}}size", f"({ext.width}, {ext.height})")
        if text:
            # one call for the whole text (end -1) instead of CharacterCount + GetText
            t = (_safe(lambda: Atspi.Text.get_text(node, 0, -1), "") or "")[:MAX_TEXT]
            if t:
                el.text = "".join(c for c in t if c in "\t\n" or ord(c) >= 32)
        if val:
            v = _safe(lambda: Atspi.Value.get_current_value(node))
            if v is not None:
                el.set(f"{{{NS['val']}}}value", str(v))
        if depth >= MAX_DEPTH:
            return el
        n = _safe(lambda: node.get_child_count(), 0) or 0
        if n > MAX_CHILDREN:
            table = _safe(node.queryTable)
            if table is not None:
                self.table_cells(el, node, table, depth)
                return el
            n = MAX_CHILDREN
        for i in range(n):
            child = _safe(lambda: node.get_child_at_index(i))
            if child is None:
                continue
            c = self.element(child, depth + 1)
            if c is None:
                break
            if c is not _SKIP:
                el.append(c)
        return el

    def table_cells(self, el, node, table, depth: int) -> None:
        """Only the cells on screen: find the first and last visible cell by hit-testing the table's corners."""
        pyatspi = self.pyatspi
        comp = _safe(node.queryComponent)
        r0 = c0 = 0
        r1, c1 = MAX_TABLE_ROWS - 1, MAX_TABLE_COLS - 1
        if comp is not None:
            ext = _safe(lambda: comp.getExtents(pyatspi.DESKTOP_COORDS))
            if ext is not None:
                first = _safe(lambda: comp.getAccessibleAtPoint(ext.x + 2, ext.y + 2, pyatspi.DESKTOP_COORDS))
                last = _safe(lambda: comp.getAccessibleAtPoint(ext.x + ext.width - 3, ext.y + ext.height - 3,
                                                               pyatspi.DESKTOP_COORDS))
                for cell, which in ((first, 0), (last, 1)):
                    idx = _safe(lambda: cell.getIndexInParent()) if cell is not None else None
                    if idx is None or idx < 0:
                        continue
                    r = _safe(lambda: table.getRowAtIndex(idx))
                    c = _safe(lambda: table.getColumnAtIndex(idx))
                    if r is None or c is None:
                        continue
                    if which == 0:
                        r0, c0 = r, c
                    else:
                        r1, c1 = r, c
        r1 = min(r1, r0 + MAX_TABLE_ROWS - 1)
        c1 = min(c1, c0 + MAX_TABLE_COLS - 1)
        for r in range(r0, r1 + 1):
            for c in range(c0, c1 + 1):
                cell = _safe(lambda: table.getAccessibleAt(r, c))
                if cell is None:
                    continue
                e = self.element(cell, depth + 1, interfaces_first=True)
                if e is None:
                    return
                if e is not _SKIP:
                    el.append(e)


def deepest_focus_only(root) -> None:
    """Drop st:focused from every element that has a focused descendant (see the module docstring)."""
    focused = f"{{{NS['st']}}}focused"
    for el in list(root.iter()):
        if el.get(focused) is not None:
            for ancestor in el.iterancestors():
                ancestor.attrib.pop(focused, None)


def dump(max_nodes: int = 4000, only_showing: bool = True) -> str:
    try:
        import pyatspi
        from gi.repository import Atspi
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise SystemExit("pyatspi is missing: apt-get install python3-pyatspi gir1.2-atspi-2.0 (and use a "
                         f"venv with --system-site-packages): {e}")
    _safe(lambda: Atspi.set_timeout(3000, 15000))
    d = Dumper(pyatspi, max_nodes, only_showing)
    root = d.etree.Element("desktop-frame", nsmap=NS)
    desktop = pyatspi.Registry.getDesktop(0)
    root.set("name", _safe(lambda: desktop.name, "main") or "main")
    for i in range(_safe(lambda: desktop.childCount, 0) or 0):
        app = _safe(lambda: desktop.getChildAtIndex(i))
        if app is None:
            continue
        el = d.element(app, 1)
        if el is None:
            break
        if el is not _SKIP:
            root.append(el)
    deepest_focus_only(root)
    return d.etree.tostring(root, encoding="unicode")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-nodes", type=int, default=4000)
    ap.add_argument("--all", action="store_true", help="also nodes that are not on screen (closed menus...)")
    args = ap.parse_args(argv)
    sys.stdout.write(dump(args.max_nodes, only_showing=not args.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
