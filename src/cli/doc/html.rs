//! The HTML rendering of [`Docs`]: `index.html`, one `<page>.html` per module and
//! `search-index.js` (every module and item: name, kind, module, address, summary), read by a
//! search box whose script is in each page. Plain HTML, CSS and JavaScript, nothing fetched:
//! the pages work from a `file:` address with no network.

use super::model::{self, Docs, ItemDoc, ModuleDoc, Piece, Target, Text};
use serde_json::json;

/// `(file name, content)` of every file, index first.
pub fn render(docs: &Docs) -> Vec<(String, String)> {
    let mut files = vec![("index.html".to_string(), index(docs))];
    for m in &docs.modules {
        files.push((format!("{}.html", m.page), module(docs, m)));
    }
    files.push(("search-index.js".to_string(), search_index(docs)));
    files
}

fn index(docs: &Docs) -> String {
    let title = model::title(docs);
    let mut body = format!("<h1>{}</h1>\n<table class=\"modules\">\n", escape(title));
    for m in &docs.modules {
        body.push_str(&format!(
            "<tr><td><a href=\"{}.html\"><code>{}</code></a></td><td>{}</td></tr>\n",
            escape(&m.page),
            escape(&m.name),
            inline(&model::summary(m.doc.as_deref()))
        ));
    }
    body.push_str("</table>\n");
    page(title, &sidebar(docs, None), &body)
}

fn module(docs: &Docs, m: &ModuleDoc) -> String {
    let mut body = format!("<h1>module <code>{}</code></h1>\n", escape(&m.name));
    if let Some(doc) = &m.doc {
        body.push_str(&format!("<div class=\"doc\">\n{}</div>\n", doc_html(doc)));
    }
    if m.items.is_empty() {
        body.push_str("<p>Nothing here is <code>pub</code>.</p>\n");
    }
    for item in &m.items {
        body.push_str(&item_section(m, item));
    }
    page(&m.name, &sidebar(docs, Some(m)), &body)
}

fn item_section(m: &ModuleDoc, item: &ItemDoc) -> String {
    let anchor = escape(&item.anchor);
    let mut s = format!(
        "<section class=\"item\" id=\"{anchor}\">\n<h2><span class=\"kw\">{}</span> \
         <a href=\"#{anchor}\">{}</a></h2>\n",
        escape(item.keyword),
        escape(&item.name)
    );
    if item.shows_header() {
        s.push_str(&format!(
            "<pre class=\"sig\"><code>{}</code></pre>\n",
            text_html(m, &item.header)
        ));
    }
    if let Some(def) = &item.definition {
        s.push_str(&format!(
            "<pre class=\"def\"><code>{}</code></pre>\n",
            text_html(m, def)
        ));
    }
    if item.recipe {
        s.push_str(&format!(
            "<div class=\"note\">\n{}</div>\n",
            doc_html(&super::model::recipe_note(&item.name))
        ));
    }
    if let Some(doc) = &item.doc {
        s.push_str(&format!("<div class=\"doc\">\n{}</div>\n", doc_html(doc)));
    }
    if !item.params.is_empty() {
        // The default column only where a parameter has one.
        let defaults = item.params.iter().any(|p| p.default.is_some());
        s.push_str("<table class=\"params\">\n<tr><th>parameter</th><th>type</th>");
        s.push_str(if defaults {
            "<th>default</th></tr>\n"
        } else {
            "</tr>\n"
        });
        for p in &item.params {
            let ty = match &p.ty {
                Some(t) if p.inferred => format!(
                    "<code>{}</code> <span class=\"note\">(of the default)</span>",
                    text_html(m, t)
                ),
                Some(t) => format!("<code>{}</code>", text_html(m, t)),
                None => String::new(),
            };
            let ty = match p.generic {
                Some(kind) => format!("{ty} <span class=\"note\">(generic: {kind})</span>"),
                None => ty,
            };
            s.push_str(&format!(
                "<tr><td><code>{}</code></td><td>{ty}</td>",
                escape(&p.name)
            ));
            if defaults {
                let default = p
                    .default
                    .as_ref()
                    .map(|d| format!("<code>{}</code>", text_html(m, d)))
                    .unwrap_or_default();
                s.push_str(&format!("<td>{default}</td>"));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
    }
    if !item.fields.is_empty() {
        s.push_str("<table class=\"fields\">\n<tr><th>field</th><th>type</th></tr>\n");
        for (name, ty) in &item.fields {
            s.push_str(&format!(
                "<tr><td><code>{}</code></td><td><code>{}</code></td></tr>\n",
                escape(name),
                text_html(m, ty)
            ));
        }
        s.push_str("</table>\n");
    }
    s.push_str("</section>\n");
    s
}

/// The navigation: search, the modules, and the current module's items.
fn sidebar(docs: &Docs, current: Option<&ModuleDoc>) -> String {
    let mut s = String::from(
        "<p><a href=\"index.html\">All modules</a></p>\n\
         <input id=\"search\" type=\"search\" placeholder=\"Search items\" autocomplete=\"off\" \
         aria-label=\"Search items\">\n<ul id=\"results\"></ul>\n<h3>Modules</h3>\n<ul>\n",
    );
    for m in &docs.modules {
        let class = if current.is_some_and(|c| c.page == m.page) {
            " class=\"current\""
        } else {
            ""
        };
        s.push_str(&format!(
            "<li{class}><a href=\"{}.html\">{}</a></li>\n",
            escape(&m.page),
            escape(&m.name)
        ));
    }
    s.push_str("</ul>\n");
    if let Some(m) = current.filter(|m| !m.items.is_empty()) {
        s.push_str("<h3>Contents</h3>\n<ul>\n");
        for item in &m.items {
            s.push_str(&format!(
                "<li><a href=\"#{}\"><span class=\"kw\">{}</span> {}</a>{}</li>\n",
                escape(&item.anchor),
                escape(item.keyword),
                escape(&item.name),
                if item.recipe {
                    " <span class=\"note\">recipe</span>"
                } else {
                    ""
                }
            ));
        }
        s.push_str("</ul>\n");
    }
    s
}

fn page(title: &str, sidebar: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"rlc doc\">\n<title>{} — rlc doc</title>\n\
         <style>\n{STYLE}</style>\n</head>\n<body>\n<nav>\n{sidebar}</nav>\n<main>\n{body}</main>\n\
         <script src=\"search-index.js\"></script>\n<script>\n{SEARCH}</script>\n</body>\n</html>\n",
        escape(title)
    )
}

const STYLE: &str = "\
body { margin: 0; display: flex; font: 15px/1.5 system-ui, sans-serif; color: #1b1b1b; }
nav { width: 16rem; flex: none; padding: 1rem; border-right: 1px solid #ddd; background: #f7f7f7;
  min-height: 100vh; box-sizing: border-box; }
nav ul { list-style: none; padding-left: 0; margin: 0.25rem 0; }
nav li.current > a { font-weight: bold; }
nav input { width: 100%; box-sizing: border-box; padding: 0.3rem; }
#results li { margin: 0.2rem 0; }
#results .note { color: #666; font-size: 0.85em; }
main { padding: 1rem 2rem; max-width: 60rem; min-width: 0; }
a { color: #0b57d0; text-decoration: none; }
a:hover { text-decoration: underline; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }
pre { background: #f3f3f3; padding: 0.6rem; overflow-x: auto; border-radius: 4px; }
section.item { border-top: 1px solid #e4e4e4; margin-top: 1.5rem; }
section.item h2 { font-size: 1.15rem; }
.kw { color: #8a3ffc; }
table { border-collapse: collapse; margin: 0.5rem 0; }
td, th { border: 1px solid #ddd; padding: 0.2rem 0.6rem; text-align: left; vertical-align: top; }
.note { color: #666; }
";

/// The search box: matches the query against each entry's path (`std.algo.masked_mean`,
/// `net in lib.rl`; case-insensitive), exact names first, then names that start with it, then
/// the rest; at most 50 results.
const SEARCH: &str = r#"(function () {
  var box = document.getElementById("search");
  var out = document.getElementById("results");
  function rank(e, q) {
    var n = e.name.toLowerCase();
    return n === q ? 0 : n.indexOf(q) === 0 ? 1 : 2;
  }
  box.addEventListener("input", function () {
    var q = box.value.trim().toLowerCase();
    while (out.firstChild) out.removeChild(out.firstChild);
    if (!q) return;
    var hits = (window.RLC_SEARCH_INDEX || []).filter(function (e) {
      return e.path.toLowerCase().indexOf(q) >= 0;
    });
    hits.sort(function (a, b) {
      var d = rank(a, q) - rank(b, q);
      if (d) return d;
      var x = a.path, y = b.path;
      return x < y ? -1 : x > y ? 1 : 0;
    });
    hits.slice(0, 50).forEach(function (e) {
      var li = document.createElement("li");
      var a = document.createElement("a");
      a.href = e.url;
      a.textContent = e.kind + " " + e.path;
      li.appendChild(a);
      if (e.summary) {
        var s = document.createElement("div");
        s.className = "note";
        s.textContent = e.summary;
        li.appendChild(s);
      }
      out.appendChild(li);
    });
  });
})();
"#;

/// `search-index.js`: one entry a line, modules and items in page order; `path` is how a
/// reader names the entry (see [`model::Target::path`]).
fn search_index(docs: &Docs) -> String {
    let mut entries = Vec::new();
    for m in &docs.modules {
        entries.push(json!({
            "name": m.name,
            "kind": "module",
            "module": m.name,
            "path": m.name,
            "url": format!("{}.html", m.page),
            "summary": model::summary(m.doc.as_deref()),
        }));
        for item in &m.items {
            let path = model::Target {
                page: m.page.clone(),
                anchor: item.anchor.clone(),
                module: m.name.clone(),
                name: item.name.clone(),
            }
            .path();
            entries.push(json!({
                "name": item.name,
                "kind": item.keyword,
                "module": m.name,
                "path": path,
                "url": format!("{}.html#{}", m.page, item.anchor),
                "summary": model::summary(item.doc.as_deref()),
            }));
        }
    }
    let lines: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
    format!(
        "// Generated by `rlc doc`: every documented module and item, for the search box.\n\
         window.RLC_SEARCH_INDEX = [\n{}\n];\n",
        lines.join(",\n")
    )
}

fn href(from: &ModuleDoc, to: &Target) -> String {
    if to.page == from.page {
        format!("#{}", to.anchor)
    } else {
        format!("{}.html#{}", to.page, to.anchor)
    }
}

/// Source text with its links, escaped.
fn text_html(m: &ModuleDoc, text: &Text) -> String {
    text.iter()
        .map(|p| match p {
            Piece::Plain(s) => escape(s),
            Piece::Link { text, to } => format!(
                "<a href=\"{}\" title=\"{}\">{}</a>",
                escape(&href(m, to)),
                escape(&to.path()),
                escape(text)
            ),
        })
        .collect()
}

pub fn escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&#39;"),
            c => s.push(c),
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Doc comments: the Markdown they are written in, as far as this project's comments use it
// (paragraphs, `-` lists, fenced code, headings, `code` and **strong**); anything else is
// shown as text.

fn doc_html(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if t.is_empty() {
            i += 1;
        } else if t.starts_with("```") {
            i += 1;
            let mut code = Vec::new();
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                code.push(lines[i]);
                i += 1;
            }
            i += 1;
            out.push_str(&format!(
                "<pre><code>{}</code></pre>\n",
                escape(&code.join("\n"))
            ));
        } else if let Some((level, title)) = heading(t) {
            let h = (level + 2).min(6);
            out.push_str(&format!("<h{h}>{}</h{h}>\n", inline(title)));
            i += 1;
        } else if bullet(t).is_some() {
            out.push_str("<ul>\n");
            let mut item: Option<String> = None;
            while i < lines.len() {
                let line = lines[i];
                let t = line.trim_start();
                if let Some(rest) = bullet(t) {
                    if let Some(done) = item.take() {
                        out.push_str(&format!("<li>{}</li>\n", inline(&done)));
                    }
                    item = Some(rest.to_string());
                } else if !t.is_empty() && line.starts_with(char::is_whitespace) {
                    if let Some(cur) = item.as_mut() {
                        cur.push('\n');
                        cur.push_str(t);
                    }
                } else {
                    break;
                }
                i += 1;
            }
            if let Some(done) = item {
                out.push_str(&format!("<li>{}</li>\n", inline(&done)));
            }
            out.push_str("</ul>\n");
        } else {
            let mut para = Vec::new();
            while i < lines.len() {
                let t = lines[i].trim_start();
                if t.is_empty() || t.starts_with("```") || heading(t).is_some() {
                    break;
                }
                if bullet(t).is_some() && !para.is_empty() {
                    break;
                }
                para.push(t);
                i += 1;
            }
            out.push_str(&format!("<p>{}</p>\n", inline(&para.join("\n"))));
        }
    }
    out
}

fn heading(t: &str) -> Option<(usize, &str)> {
    let level = t.bytes().take_while(|&b| b == b'#').count();
    let rest = &t[level..];
    (level > 0 && level <= 6 && rest.starts_with(' ')).then(|| (level, rest.trim()))
}

fn bullet(t: &str) -> Option<&str> {
    t.strip_prefix("- ").or_else(|| t.strip_prefix("* "))
}

/// Inline Markdown: `code` spans and **strong**; everything else escaped as text.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if rest.starts_with('`') {
            let ticks = rest.bytes().take_while(|&b| b == b'`').count();
            let fence = &rest[..ticks];
            if let Some(end) = rest[ticks..].find(fence) {
                let code = &rest[ticks..ticks + end];
                let code = code.strip_prefix(' ').unwrap_or(code);
                let code = code.strip_suffix(' ').unwrap_or(code);
                out.push_str(&format!("<code>{}</code>", escape(code)));
                rest = &rest[ticks + end + ticks..];
                continue;
            }
            out.push_str(fence);
            rest = &rest[ticks..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("**")
            && let Some(end) = after.find("**")
            && end > 0
        {
            out.push_str(&format!("<strong>{}</strong>", inline(&after[..end])));
            rest = &after[end + 2..];
            continue;
        }
        let first = rest.chars().next().map_or(1, char::len_utf8);
        let next = rest[first..]
            .find(['`', '*'])
            .map_or(rest.len(), |at| at + first);
        out.push_str(&escape(&rest[..next]));
        rest = &rest[next..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{doc_html, inline};

    #[test]
    fn inline_code_strong_and_escapes() {
        assert_eq!(
            inline("`a < b` and **x & y**"),
            "<code>a &lt; b</code> and <strong>x &amp; y</strong>"
        );
        assert_eq!(inline("x * y ` z"), "x * y ` z");
        assert_eq!(inline("``a`b``"), "<code>a`b</code>");
    }

    #[test]
    fn blocks() {
        let html = doc_html("One\ntwo.\n\n- a\n  b\n- c\n\n```\nx < y\n```\n# Title");
        assert_eq!(
            html,
            "<p>One\ntwo.</p>\n<ul>\n<li>a\nb</li>\n<li>c</li>\n</ul>\n\
             <pre><code>x &lt; y</code></pre>\n<h3>Title</h3>\n"
        );
    }
}
