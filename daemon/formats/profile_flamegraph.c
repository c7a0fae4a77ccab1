/* profile_flamegraph.c: an interactive flame graph, one self-contained SVG file, as
 * flamegraph.pl, inferno and `py-spy record` draw them.
 *
 * The root "all" at the bottom, a box per thread (named as in collapsed output) on it, then
 * each thread's frames towards the leaves; siblings sorted by name, a box's width its share
 * of the samples. Hovering a box shows its name and counts, clicking it zooms to it (its
 * callers shown faded below), "Search" highlights the functions that match a regular
 * expression and says what share of the samples they cover, "Reset Zoom" goes back. Colours
 * say what runs there: Python code, the program's native code, libraries' native code, and
 * frames that could not be named.
 *
 * Every box carries its place in samples (data-s: samples before it on its row, data-n: its
 * samples), so zooming and searching are exact; the drawn x and width come from them. Names
 * are made valid UTF-8 and escaped for XML (a target controls them). */
#include "profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "containers.h"

#define WIDTH 1200
#define PAD 10
#define ROW 16          /* a frame's row height */
#define TOP 60          /* title, legend and buttons above the frames */
#define BOTTOM 30       /* the details line below them */
#define CHAR_PX 7.0     /* average width of a 12 px Verdana character */
#define MIN_PX 0.1      /* narrower boxes are left out, as flamegraph.pl does */

enum kind { K_ROOT, K_PYTHON, K_APP, K_LIB, K_UNKNOWN };

struct node {
    const char *name; /* interned */
    enum kind kind;
    uint32_t depth;
    uint64_t count;
    uint32_t first_child, next; /* children, in insertion order; 0: none (node 0 is root) */
    const char *file;           /* interned: the source file of its samples' frames */
    int line_lo, line_hi;       /* the lines of them in that file (0: none) */
};

struct fg {
    const struct profile *p;
    struct strset names;
    struct u64map name_ids; /* interned pointer -> id + 1 */
    uint32_t nnames;
    struct node *nodes;
    uint32_t n, cap;
    struct u64map child;    /* parent << 32 | name id -> node */
    uint32_t maxdepth;
};

static uint32_t name_id(struct fg *g, const char *interned)
{
    uintptr_t id = (uintptr_t)u64map_get(&g->name_ids, (uint64_t)(uintptr_t)interned);
    if (!id) {
        id = ++g->nnames;
        u64map_put(&g->name_ids, (uint64_t)(uintptr_t)interned, (void *)id);
    }
    return (uint32_t)(id - 1);
}

/* The child of parent named s (made on first use), with count added. */
static uint32_t child(struct fg *g, uint32_t parent, const char *s, enum kind kind, uint64_t count)
{
    const char *name = strset_intern(&g->names, s, strlen(s));
    uint64_t key = (uint64_t)parent << 32 | name_id(g, name);
    uintptr_t c = (uintptr_t)u64map_get(&g->child, key);
    if (!c) {
        if (g->n == g->cap) {
            g->cap *= 2;
            g->nodes = xrealloc(g->nodes, g->cap * sizeof(*g->nodes));
        }
        c = g->n++;
        struct node *nd = &g->nodes[c];
        *nd = (struct node){.name = name, .kind = kind, .depth = g->nodes[parent].depth + 1};
        nd->next = g->nodes[parent].first_child;
        g->nodes[parent].first_child = (uint32_t)c;
        if (nd->depth > g->maxdepth)
            g->maxdepth = nd->depth;
        u64map_put(&g->child, key, (void *)c);
    }
    g->nodes[c].count += count;
    return (uint32_t)c;
}

/* Where a node's frame f is in the source: its file, and the range of its lines there. */
static void source(struct fg *g, struct node *nd, const struct profile_frame *f)
{
    if (!f->file || !*f->file || f->line <= 0)
        return;
    const char *file = strset_intern(&g->names, f->file, strlen(f->file));
    if (!nd->file) {
        nd->file = file;
        nd->line_lo = nd->line_hi = f->line;
    } else if (nd->file == file) {
        nd->line_lo = f->line < nd->line_lo ? f->line : nd->line_lo;
        nd->line_hi = f->line > nd->line_hi ? f->line : nd->line_hi;
    }
}

static enum kind frame_kind(const struct profile_frame *f)
{
    if (f->python)
        return K_PYTHON;
    if (!f->function || !*f->function)
        return K_UNKNOWN;
    return f->in_app ? K_APP : K_LIB;
}

/* FNV-1a of the name, as a fraction: the same function gets the same shade everywhere. */
static double shade(const char *s)
{
    uint64_t h = hash_bytes(s, strlen(s));
    return (double)(h >> 11) / (double)(1ull << 53);
}

static void colour(const struct node *nd, char *out, size_t size)
{
    double v = shade(nd->name), w = shade(nd->name + (nd->name[0] != '\0'));
    int r, g, b;
    switch (nd->kind) {
    case K_PYTHON: /* greens and yellows */
        r = 80 + (int)(100 * v), g = 190 + (int)(50 * w), b = 60 + (int)(40 * v);
        break;
    case K_APP: /* flamegraph.pl's "hot": reds and oranges */
        r = 205 + (int)(50 * w), g = (int)(150 * v), b = (int)(50 * w);
        break;
    case K_LIB: /* lighter oranges and yellows */
        r = 225 + (int)(30 * w), g = 160 + (int)(70 * v), b = 40 + (int)(50 * w);
        break;
    case K_UNKNOWN:
        r = g = b = 170 + (int)(40 * v);
        break;
    default:
        r = 190 + (int)(20 * v), g = 190 + (int)(20 * v), b = 225;
        break;
    }
    snprintf(out, size, "rgb(%d,%d,%d)", r, g, b);
}

/* Append s for XML text or an attribute: valid UTF-8, escaped, no control characters. At
 * most max characters ("" if fewer than 3 fit; "name.." if cut). */
static int put_xml(struct strbuf *sb, const char *s, size_t max)
{
    char *u = profile_utf8(s);
    if (!u)
        return -ENOMEM;
    size_t nchars = 0;
    for (const unsigned char *c = (const unsigned char *)u; *c; c++)
        nchars += (*c & 0xc0) != 0x80;
    bool cut = nchars > max;
    size_t keep = cut ? (max >= 3 ? max - 2 : 0) : nchars, seen = 0;
    int r = 0;
    for (const unsigned char *c = (const unsigned char *)u; *c && r == 0; c++) {
        if ((*c & 0xc0) != 0x80 && seen++ == keep)
            break;
        switch (*c) {
        case '&': r = strbuf_puts(sb, "&amp;"); break;
        case '<': r = strbuf_puts(sb, "&lt;"); break;
        case '>': r = strbuf_puts(sb, "&gt;"); break;
        case '"': r = strbuf_puts(sb, "&quot;"); break;
        case '\'': r = strbuf_puts(sb, "&apos;"); break;
        default:
            r = *c < 0x20 || *c == 0x7f ? strbuf_puts(sb, "?") : strbuf_append(sb, c, 1);
        }
    }
    if (r == 0 && cut && keep)
        r = strbuf_puts(sb, "..");
    free(u);
    return r;
}

static const char SCRIPT[] =
    "<script type=\"text/ecmascript\"><![CDATA[\n"
    "'use strict';\n"
    "var W = " "1200" ", PAD = 10, CH = 7.0, total, frames, details, matched, zoomed = null;\n"
    "function init(evt) {\n"
    "  frames = Array.prototype.slice.call(document.querySelectorAll('g.f'));\n"
    "  details = document.getElementById('details');\n"
    "  matched = document.getElementById('matched');\n"
    "  total = +document.getElementById('frames').getAttribute('data-total');\n"
    "  frames.forEach(function (g) {\n"
    "    g.addEventListener('mouseover', function () {\n"
    "      var src = g.getAttribute('data-src');\n"
    "      details.textContent = title(g) + (src ? '  ' + src : ''); });\n"
    "    g.addEventListener('mouseout', function () { details.textContent = ' '; });\n"
    "    g.addEventListener('click', function () { zoom(g); });\n"
    "  });\n"
    "  document.getElementById('reset').addEventListener('click', unzoom);\n"
    "  document.getElementById('search').addEventListener('click', searchPrompt);\n"
    "}\n"
    "function title(g) { return g.querySelector('title').textContent; }\n"
    "function fname(g) { var t = title(g); return t.substring(0, t.lastIndexOf(' (')); }\n"
    "function S(g) { return +g.getAttribute('data-s'); }\n"
    "function N(g) { return +g.getAttribute('data-n'); }\n"
    "function D(g) { return +g.getAttribute('data-d'); }\n"
    "function fit(g, w) {\n"
    "  var t = g.querySelector('text'), name = fname(g), max = Math.floor((w - 6) / CH);\n"
    "  t.textContent = max < 3 ? '' : name.length <= max ? name : name.substring(0, max - 2) + '..';\n"
    "}\n"
    "function place(g, x, w) {\n"
    "  var r = g.querySelector('rect'), t = g.querySelector('text');\n"
    "  r.setAttribute('x', x); r.setAttribute('width', Math.max(w - (w > 2 ? 1 : 0), 0.1));\n"
    "  t.setAttribute('x', x + 3); fit(g, w);\n"
    "}\n"
    "function zoom(z) {\n"
    "  var s0 = S(z), n0 = N(z), d0 = D(z), scale = (W - 2 * PAD) / n0;\n"
    "  zoomed = z; document.getElementById('reset').style.opacity = 1;\n"
    "  frames.forEach(function (g) {\n"
    "    var s = S(g), n = N(g), d = D(g);\n"
    "    g.classList.remove('parent'); g.style.display = '';\n"
    "    if (d < d0 && s <= s0 && s + n >= s0 + n0) {\n"
    "      g.classList.add('parent'); place(g, PAD, W - 2 * PAD);\n"
    "    } else if (d >= d0 && s >= s0 && s + n <= s0 + n0) {\n"
    "      place(g, PAD + (s - s0) * scale, n * scale);\n"
    "    } else {\n"
    "      g.style.display = 'none';\n"
    "    }\n"
    "  });\n"
    "}\n"
    "function unzoom() {\n"
    "  zoomed = null; document.getElementById('reset').style.opacity = 0;\n"
    "  var scale = (W - 2 * PAD) / total;\n"
    "  frames.forEach(function (g) {\n"
    "    g.classList.remove('parent'); g.style.display = '';\n"
    "    place(g, PAD + S(g) * scale, N(g) * scale);\n"
    "  });\n"
    "}\n"
    "function searchPrompt() {\n"
    "  var term = prompt('Search for functions matching (a regular expression)', '');\n"
    "  if (term !== null) search(term);\n"
    "}\n"
    "function search(term) {\n"
    "  var re = term ? new RegExp(term) : null, spans = [];\n"
    "  frames.forEach(function (g) {\n"
    "    var r = g.querySelector('rect');\n"
    "    if (!r.hasAttribute('data-fill')) r.setAttribute('data-fill', r.getAttribute('fill'));\n"
    "    var hit = re && re.test(fname(g));\n"
    "    r.setAttribute('fill', hit ? 'rgb(230,0,230)' : r.getAttribute('data-fill'));\n"
    "    if (hit) spans.push([S(g), S(g) + N(g)]);\n"
    "  });\n"
    "  spans.sort(function (a, b) { return a[0] - b[0]; });\n"
    "  var covered = 0, end = -1;\n"
    "  spans.forEach(function (sp) {\n"
    "    if (sp[0] >= end) { covered += sp[1] - sp[0]; end = sp[1]; }\n"
    "    else if (sp[1] > end) { covered += sp[1] - end; end = sp[1]; }\n"
    "  });\n"
    "  matched.textContent = re ? 'Matched: ' + (100 * covered / total).toFixed(1) + '% (' +\n"
    "      covered + ' samples)' : ' ';\n"
    "  return covered;\n"
    "}\n"
    "]]></script>\n";

static const char STYLE[] =
    "<style type=\"text/css\">\n"
    "text { font-family: Verdana, sans-serif; font-size: 12px; fill: rgb(0,0,0); }\n"
    "#title { font-size: 17px; text-anchor: middle; }\n"
    "#search, #reset { cursor: pointer; }\n"
    "#reset { opacity: 0; }\n"
    "g.f { cursor: pointer; }\n"
    "g.f:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }\n"
    "g.parent { opacity: 0.5; }\n"
    "text.n { pointer-events: none; }\n"
    "</style>\n";

/* Lay out and write node i (its first sample at s) and its children, sorted by name. */
static int emit(struct fg *g, struct strbuf *sb, uint32_t i, uint64_t s, uint32_t height,
                uint64_t total, uint32_t **order)
{
    const struct node *nd = &g->nodes[i];
    double scale = (double)(WIDTH - 2 * PAD) / (double)total;
    double x = PAD + (double)s * scale, w = (double)nd->count * scale;
    if (w < MIN_PX)
        return 0;
    double y = height - BOTTOM - (double)(nd->depth + 1) * ROW;
    char fill[32];
    colour(nd, fill, sizeof(fill));
    int r = strbuf_printf(sb, "<g class=\"f\" data-s=\"%" PRIu64 "\" data-n=\"%" PRIu64
                              "\" data-d=\"%" PRIu32 "\"", s, nd->count, nd->depth);
    /* Its source (shown on the details line): file:line, or file:first-last. */
    if (!r && nd->file) {
        r = strbuf_puts(sb, " data-src=\"");
        r = r ? r : put_xml(sb, nd->file, SIZE_MAX);
        r = r ? r : strbuf_printf(sb, ":%d", nd->line_lo);
        if (!r && nd->line_hi != nd->line_lo)
            r = strbuf_printf(sb, "-%d", nd->line_hi);
        r = r ? r : strbuf_puts(sb, "\"");
    }
    r = r ? r : strbuf_puts(sb, "><title>");
    r = r ? r : put_xml(sb, nd->name, SIZE_MAX);
    r = r ? r : strbuf_printf(sb, " (%" PRIu64 " samples, %.2f%%)</title><rect x=\"%.2f\" y=\"%.1f\" "
                                  "width=\"%.2f\" height=\"%d\" rx=\"2\" fill=\"%s\"/>"
                                  "<text class=\"n\" x=\"%.2f\" y=\"%.1f\">",
                              nd->count, 100.0 * (double)nd->count / (double)total, x, y,
                              w > 2 ? w - 1 : w, ROW - 1, fill, x + 3, y + 11.5);
    double fits = (w - 6) / CHAR_PX;
    r = r ? r : put_xml(sb, nd->name, fits > 0 ? (size_t)fits : 0);
    r = r ? r : strbuf_puts(sb, "</text></g>\n");
    /* Children by name, as flamegraph.pl sorts the stacks. */
    size_t n = 0;
    for (uint32_t c = nd->first_child; c; c = g->nodes[c].next)
        n++;
    if (r || !n)
        return r;
    uint32_t *kids = xmalloc(n * sizeof(*kids));
    n = 0;
    for (uint32_t c = nd->first_child; c; c = g->nodes[c].next)
        kids[n++] = c;
    *order = kids;
    for (size_t a = 1; a < n; a++) /* insertion sort: few children, mostly */
        for (size_t b = a; b > 0 && strcmp(g->nodes[kids[b - 1]].name, g->nodes[kids[b]].name) > 0; b--) {
            uint32_t t = kids[b];
            kids[b] = kids[b - 1];
            kids[b - 1] = t;
        }
    uint64_t at = s;
    for (size_t k = 0; r == 0 && k < n; k++) {
        uint32_t *sub = NULL;
        r = emit(g, sb, kids[k], at, height, total, &sub);
        free(sub);
        at += g->nodes[kids[k]].count;
    }
    return r;
}

int profile_write_flamegraph(const struct profile *p, struct strbuf *out)
{
    struct fg g = {.p = p, .cap = 256};
    g.nodes = xmalloc(g.cap * sizeof(*g.nodes));
    g.nodes[0] = (struct node){.name = strset_intern(&g.names, "all", 3), .kind = K_ROOT};
    g.n = 1;
    struct strbuf name = {0};
    int r = 0;
    for (size_t i = 0; r == 0 && i < p->nsamples; i++) {
        const struct profile_sample *s = &p->samples[i];
        if (s->stack >= p->nstacks)
            continue;
        g.nodes[0].count++;
        const char *tn = profile_thread_name(p, s->tid);
        name.len = 0;
        r = strbuf_puts(&name, tn && *tn ? tn : p->comm ? p->comm : "[unknown]");
        if (r == 0 && p->thread_ids)
            r = strbuf_printf(&name, "-%" PRId32, s->tid);
        if (r)
            break;
        uint32_t at = child(&g, 0, name.buf, K_ROOT, 1);
        const struct profile_stack *st = &p->stacks[s->stack];
        for (uint32_t k = st->frames ? st->n : 0; r == 0 && k-- > 0;) {
            if (st->frames[k] >= p->nframes)
                continue;
            const struct profile_frame *f = &p->frames[st->frames[k]];
            name.len = 0;
            r = profile_frame_name(&name, f);
            if (r == 0) {
                at = child(&g, at, name.buf, frame_kind(f), 1);
                source(&g, &g.nodes[at], f);
            }
        }
    }
    strbuf_finish(&name);
    uint64_t total = g.nodes[0].count ? g.nodes[0].count : 1;
    uint32_t height = TOP + (g.maxdepth + 1) * ROW + BOTTOM;
    char title[256];
    snprintf(title, sizeof(title), "Flame graph: %s (pid %d), %" PRIu64 " samples at %u Hz%s",
             p->comm ? p->comm : "?", (int)p->pid, g.nodes[0].count, p->hz,
             p->cputime ? " of CPU time" : "");
    static const struct { enum kind k; const char *label; } legend[] = {
        {K_PYTHON, "Python"}, {K_APP, "native: the program"}, {K_LIB, "native: libraries"},
        {K_UNKNOWN, "unresolved"}};
    if (r == 0)
        r = strbuf_printf(out,
                          "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
                          "<svg version=\"1.1\" width=\"%d\" height=\"%" PRIu32 "\" "
                          "viewBox=\"0 0 %d %" PRIu32 "\" onload=\"init(evt)\" "
                          "xmlns=\"http://www.w3.org/2000/svg\">\n%s%s"
                          "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" "
                          "fill=\"rgb(248,248,240)\"/>\n<text id=\"title\" x=\"%d\" y=\"24\">",
                          WIDTH, height, WIDTH, height, STYLE, SCRIPT, WIDTH / 2);
    r = r ? r : put_xml(out, title, SIZE_MAX);
    /* How it was sampled, in the SVG's own place for a description. */
    struct strbuf how = {0};
    r = r ? r : profile_describe_sampling(p, &how);
    r = r ? r : strbuf_puts(out, "</text>\n<desc>");
    r = r ? r : put_xml(out, how.buf, SIZE_MAX);
    strbuf_finish(&how);
    r = r ? r : strbuf_printf(out, "</desc>\n<text id=\"reset\" x=\"%d\" y=\"24\">Reset Zoom"
                                   "</text>\n<text id=\"search\" x=\"%d\" y=\"24\">Search</text>\n",
                              PAD, WIDTH - PAD - 60);
    for (size_t i = 0; r == 0 && i < sizeof(legend) / sizeof(legend[0]); i++) {
        struct node nd = {.name = legend[i].label, .kind = legend[i].k};
        char fill[32];
        colour(&nd, fill, sizeof(fill));
        r = strbuf_printf(out, "<rect x=\"%zu\" y=\"34\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                               "<text x=\"%zu\" y=\"45\">%s</text>\n",
                          PAD + i * 200, fill, PAD + i * 200 + 16, legend[i].label);
    }
    r = r ? r : strbuf_printf(out, "<text id=\"details\" x=\"%d\" y=\"%" PRIu32 "\"> </text>\n"
                                   "<text id=\"matched\" x=\"%d\" y=\"%" PRIu32 "\"> </text>\n"
                                   "<g id=\"frames\" data-total=\"%" PRIu64 "\">\n",
                              PAD, height - 10, WIDTH - PAD - 220, height - 10, total);
    uint32_t *order = NULL;
    if (r == 0 && g.nodes[0].count)
        r = emit(&g, out, 0, 0, height, total, &order);
    free(order);
    r = r ? r : strbuf_puts(out, "</g>\n</svg>\n");
    free(g.nodes);
    strset_finish(&g.names);
    u64map_finish(&g.name_ids);
    u64map_finish(&g.child);
    return r;
}
