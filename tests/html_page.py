"""Read an HTML report with the standard library's parser: its tables, headings, sections and links."""
from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Row:
    group: str  # "thead", "tbody" or "tfoot"
    cls: str
    cells: list[str] = field(default_factory=list)  # the text of each td/th, nested elements included
    links: list[str] = field(default_factory=list)  # hrefs inside the row


@dataclass
class Table:
    cls: str
    rows: list[Row] = field(default_factory=list)

    def body(self) -> list[Row]:
        return [r for r in self.rows if r.group == "tbody"]


class Page(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []  # every start tag, in order
        self.urls: list[str] = []  # every href and src
        self.tables: list[Table] = []
        self.headings: list[tuple[str, str]] = []  # (h1|h2|h3, text)
        self.sections: list[tuple[str | None, str]] = []  # (id, class)
        self.items: list[str] = []  # the text of each <li>
        self._group, self._into = "tbody", None
        self.feed(text)
        self.close()

    def table(self, cls: str) -> Table:
        (t,) = [t for t in self.tables if cls in t.cls.split()]
        return t

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        self.urls += [a[k] for k in ("href", "src") if a.get(k)]
        if tag == "table":
            self.tables.append(Table(a.get("class") or ""))
        elif tag in ("thead", "tbody", "tfoot"):
            self._group = tag
        elif tag == "tr":
            self.tables[-1].rows.append(Row(self._group, a.get("class") or ""))
        elif tag in ("td", "th"):
            self.tables[-1].rows[-1].cells.append("")
            self._into = "cell"
        elif tag in ("h1", "h2", "h3"):
            self.headings.append((tag, ""))
            self._into = "heading"
        elif tag == "li":
            self.items.append("")
            self._into = "item"
        elif tag == "section":
            self.sections.append((a.get("id"), a.get("class") or ""))
        if tag == "a" and self._into == "cell":
            self.tables[-1].rows[-1].links.append(a.get("href"))

    def handle_endtag(self, tag):
        if tag in ("td", "th", "h1", "h2", "h3", "li"):
            self._into = None
        if tag == "table":
            self._group = "tbody"

    def handle_data(self, data):
        if self._into == "cell":
            self.tables[-1].rows[-1].cells[-1] += data
        elif self._into == "heading":
            tag, text = self.headings[-1]
            self.headings[-1] = (tag, text + data)
        elif self._into == "item":
            self.items[-1] += data
