//! The BFCL plot: tasks passed against the fault rate, a line per strategy, a panel for the
//! server deduplicating by key and one for a server that does not.

use plotters::prelude::*;

use super::run::{Cell, TaskRecord};
use super::strategies::BfclStrategy;

const COLORS: [RGBColor; 6] = [
    RGBColor(120, 120, 120),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(204, 0, 102),
    RGBColor(0, 158, 115),
    RGBColor(0, 114, 178),
];

/// The plot as SVG text.
pub(crate) fn svg(cells: &[Cell], records: &[Vec<TaskRecord>]) -> Result<String, String> {
    let mut text = String::new();
    draw(&mut text, cells, records).map_err(|e| e.to_string())?;
    Ok(text)
}

fn draw(
    text: &mut String,
    cells: &[Cell],
    records: &[Vec<TaskRecord>],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(text, (1000, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "BFCL v4 multi_turn_base: tasks passed (%) against the fault rate",
        ("sans-serif", 22),
    )?;
    for (panel, dedup) in root.split_evenly((1, 2)).iter().zip([true, false]) {
        let caption = if dedup {
            "server deduplicates by key"
        } else {
            "server ignores keys"
        };
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..30f64, 0f64..100f64)?;
        chart
            .configure_mesh()
            .max_light_lines(0)
            .x_desc("fault rate %")
            .y_desc("tasks passed %")
            .draw()?;
        for (n, strategy) in BfclStrategy::EVERY.into_iter().enumerate() {
            let color = COLORS[n % COLORS.len()];
            let points: Vec<(f64, f64)> = cells
                .iter()
                .zip(records)
                .filter(|(c, _)| c.strategy == strategy && c.dedup == dedup)
                .map(|(c, r)| {
                    let passed = r.iter().filter(|r| r.passed).count();
                    (
                        c.rate * 100.0,
                        100.0 * passed as f64 / r.len().max(1) as f64,
                    )
                })
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(strategy.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
