//! The few pieces of SVG the pictures are made of, written as text with every value escaped:
//! no SVG crate is needed for rectangles, text and groups, and the output stays plain SVG 1.1
//! that any browser, `rsvg-convert` or ticket attachment viewer shows.

use std::fmt::Write as _;

/// The one font family of every picture: monospace, so that text widths are known without
/// font metrics (DejaVu Sans Mono ships with fontconfig on Debian; the others are fallbacks).
pub const FONT: &str = "DejaVu Sans Mono, Liberation Mono, Menlo, Consolas, monospace";

/// Width of one character of [`FONT`] at `size` pixels, rounded up (monospace: 0.6 em).
pub fn char_width(size: i64) -> i64 {
    (size * 6 + 9) / 10
}

/// Text for XML character data and attribute values: `&<>"'` escaped, and characters XML 1.0
/// forbids (control characters from a topology's strings) replaced by U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// An SVG document being written: elements are appended in drawing order.
#[derive(Default)]
pub struct Svg {
    body: String,
}

/// `name="value"` pairs, values escaped when written.
pub type Attrs<'a> = &'a [(&'a str, &'a str)];

fn attrs_text(attrs: Attrs) -> String {
    let mut s = String::new();
    for (k, v) in attrs {
        let _ = write!(s, " {k}=\"{}\"", escape(v));
    }
    s
}

impl Svg {
    /// Opens a `<g>` with these attributes; close it with [`Svg::end_group`].
    pub fn group(&mut self, attrs: Attrs) {
        let _ = writeln!(self.body, "<g{}>", attrs_text(attrs));
    }

    pub fn end_group(&mut self) {
        self.body.push_str("</g>\n");
    }

    /// A tooltip for the enclosing group (browsers show it on hover; no script involved).
    pub fn title(&mut self, text: &str) {
        let _ = writeln!(self.body, "<title>{}</title>", escape(text));
    }

    pub fn rect(&mut self, x: i64, y: i64, w: i64, h: i64, attrs: Attrs) {
        let _ = writeln!(self.body, "<rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\"{}/>", attrs_text(attrs));
    }

    /// One line of text with its baseline at `y`.
    pub fn text(&mut self, x: i64, y: i64, size: i64, text: &str, attrs: Attrs) {
        let _ = writeln!(
            self.body,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"{size}\"{}>{}</text>",
            attrs_text(attrs),
            escape(text)
        );
    }

    /// The finished document, `width` x `height` pixels, white background, root attributes
    /// `root` (the picture's `data-*` facts).
    pub fn finish(self, width: i64, height: i64, root: Attrs) -> String {
        let mut out = String::with_capacity(self.body.len() + 600);
        out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" font-family=\"{}\"{}>",
            escape(FONT),
            attrs_text(root)
        );
        let _ = writeln!(out, "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>");
        out.push_str(&self.body);
        out.push_str("</svg>\n");
        out
    }
}

/// Splits `text` into lines of at most `max` characters, at spaces where possible (a word
/// longer than a line is cut). Never returns an empty list.
pub fn wrap(text: &str, max: usize) -> Vec<String> {
    let max = max.max(8);
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        let cur_len = cur.chars().count();
        if cur_len > 0 && cur_len + 1 + word.len() <= max {
            cur.push(' ');
            cur.extend(&word);
            continue;
        }
        if cur_len > 0 {
            lines.push(std::mem::take(&mut cur));
        }
        while word.len() > max {
            let rest = word.split_off(max);
            lines.push(word.iter().collect());
            word = rest;
        }
        cur = word.iter().collect();
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `text` cut to `max` characters, ending in `…` when cut.
pub fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Colours for `n` tasks, all different: twelve well-separated colours first, then hues a
/// golden angle apart at three lightnesses and three saturations (a candidate that rounds to
/// a colour already given is skipped), so that every task of a step has a colour of its own.
pub fn task_colors(n: usize) -> Vec<String> {
    const FIRST: [&str; 12] = [
        "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#17becf",
        "#bcbd22", "#7f3c8d",
    ];
    let mut out: Vec<String> = FIRST.iter().take(n).map(|c| c.to_string()).collect();
    let mut seen: std::collections::HashSet<String> = out.iter().cloned().collect();
    let mut k = 0usize;
    while out.len() < n {
        let hue = (k as f64 * 137.507_764 + 15.0) % 360.0;
        let light = [0.42, 0.62, 0.52][k % 3];
        let sat = [0.62, 0.45, 0.8][(k / 3) % 3];
        let (r, g, b) = hsl_to_rgb(hue, sat, light);
        let c = format!("#{r:02x}{g:02x}{b:02x}");
        if seen.insert(c.clone()) {
            out.push(c);
        }
        k += 1;
    }
    out
}

fn hsl_to_rgb(h: f64, s: f64, l: f64) -> (u8, u8, u8) {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = h / 60.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let to = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    (to(r), to(g), to(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(escape("a<b>&\"c'\u{1}"), "a&lt;b&gt;&amp;&quot;c&apos;\u{FFFD}");
    }

    #[test]
    fn wraps_at_spaces_and_cuts_long_words() {
        assert_eq!(wrap("aaaa bbbb cccc", 9), vec!["aaaa bbbb", "cccc"]);
        assert_eq!(wrap("abcdefghijkl", 8), vec!["abcdefgh", "ijkl"]);
        assert_eq!(wrap("", 8), vec![""]);
    }

    #[test]
    fn task_colors_are_distinct() {
        let colors = task_colors(4096);
        assert_eq!(colors.len(), 4096);
        assert_eq!(colors.iter().collect::<std::collections::BTreeSet<_>>().len(), 4096);
        assert_eq!(task_colors(2), ["#4e79a7", "#f28e2b"]);
    }
}
