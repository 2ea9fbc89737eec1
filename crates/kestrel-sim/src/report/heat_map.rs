//! The report's GPU heat map: every GPU node's cells, shaded by use, laid out in columns
//! of nodes.

use super::*;

const CELL: f64 = 14.0;
const CELL_GAP: f64 = 2.0;
const LABEL_W: f64 = 150.0;
const ROW_H: f64 = 18.0;
const BLOCK_GAP: f64 = 24.0;
/// Width the heat map's columns of nodes are laid out in.
const HEAT_W: f64 = 1060.0;

/// The GPU cells of every GPU node, laid out in columns of nodes.
pub(super) fn heat_map(nodes: &[NodeUsage]) -> String {
    let gpu_nodes: Vec<&NodeUsage> = nodes
        .iter()
        .filter(|n| n.gpus > 0 || !n.gpu_used_milli.is_empty())
        .collect();
    if gpu_nodes.is_empty() {
        return "<p class=\"note\">No GPU nodes at the end of the run.</p>\n".to_string();
    }
    let cells = |n: &NodeUsage| (n.gpus as usize).max(n.gpu_used_milli.len());
    let max_cells = gpu_nodes.iter().map(|n| cells(n)).max().unwrap_or(1).max(1);
    let block = LABEL_W + max_cells as f64 * (CELL + CELL_GAP) + BLOCK_GAP;
    let cols = ((HEAT_W / block).floor() as usize).clamp(1, gpu_nodes.len());
    let rows = gpu_nodes.len().div_ceil(cols);
    let width = cols as f64 * block - BLOCK_GAP;
    let height = rows as f64 * ROW_H;

    let (mut full, mut partial, mut idle) = (0usize, 0usize, 0usize);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {width:.0} {height:.0}\" width=\"{width:.0}\" role=\"img\" \
         aria-label=\"GPU use per node\">\n<defs><pattern id=\"kestrel-hatch\" width=\"5\" \
         height=\"5\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
         <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"#b91c1c\" stroke-width=\"2\"/>\
         </pattern></defs>\n"
    );
    for (i, node) in gpu_nodes.iter().enumerate() {
        let x0 = (i / rows) as f64 * block;
        let y0 = (i % rows) as f64 * ROW_H;
        let used: u32 = node.gpu_used_milli.iter().sum();
        let _ = writeln!(
            svg,
            "<g><title>{}: {} GPUs, {:.2} allocated, CPU {} allocated{}</title>\
             <text x=\"{x0:.0}\" y=\"{:.0}\"{}>{}</text></g>",
            esc(&node.node),
            cells(node),
            f64::from(used) / 1000.0,
            fmt_pct(node.cpu_allocated),
            if node.cordoned { ", cordoned" } else { "" },
            y0 + 12.0,
            if node.cordoned { " class=\"cord\"" } else { "" },
            esc(&clip(&node.node, 22))
        );
        for g in 0..cells(node) {
            let milli = node.gpu_used_milli.get(g).copied().unwrap_or(0);
            match milli {
                0 => idle += 1,
                1000.. => full += 1,
                _ => partial += 1,
            }
            let _ = writeln!(
                svg,
                "<rect x=\"{:.0}\" y=\"{:.0}\" width=\"{CELL}\" height=\"{CELL}\" rx=\"2\" \
                 fill=\"{}\" stroke=\"#cbd5e1\" stroke-width=\"0.5\"><title>{} GPU {g}: \
                 {milli}/1000</title></rect>",
                x0 + LABEL_W + g as f64 * (CELL + CELL_GAP),
                y0 + 2.0,
                shade(milli),
                esc(&node.node)
            );
        }
        if node.cordoned {
            let _ = writeln!(
                svg,
                "<rect x=\"{:.0}\" y=\"{:.0}\" width=\"{:.0}\" height=\"{CELL}\" \
                 fill=\"url(#kestrel-hatch)\" fill-opacity=\"0.45\" stroke=\"#b91c1c\" \
                 pointer-events=\"none\"/>",
                x0 + LABEL_W - 1.0,
                y0 + 2.0,
                cells(node) as f64 * (CELL + CELL_GAP) - CELL_GAP + 2.0
            );
        }
    }
    svg.push_str("</svg>\n");

    let mut o = String::from("<div class=\"legend\"><span>0</span>");
    for milli in [0, 250, 500, 750, 1000] {
        let _ = write!(
            o,
            "<span><i class=\"sw\" style=\"background:{}\"></i></span>",
            shade(milli)
        );
    }
    let hidden = nodes.len() - gpu_nodes.len();
    let _ = writeln!(
        o,
        "<span>1000 thousandths</span><span><i class=\"sw hatch\"></i>cordoned</span>\
         <span>{} nodes &middot; {full} GPUs full &middot; {partial} shared or partly used \
         &middot; {idle} idle{}</span></div>",
        gpu_nodes.len(),
        if hidden > 0 {
            format!(" &middot; {hidden} CPU-only nodes not shown")
        } else {
            String::new()
        }
    );
    o.push_str(&svg);
    o
}

/// Cell colour for `milli` thousandths used: light grey-blue (idle) to dark blue (full).
pub(super) fn shade(milli: u32) -> String {
    let t = f64::from(milli.min(1000)) / 1000.0;
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(241.0, 30.0),
        mix(245.0, 64.0),
        mix(249.0, 175.0)
    )
}
