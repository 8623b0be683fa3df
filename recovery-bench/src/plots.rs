//! The plots: one panel per fault mix, a line per strategy, against the fault rate.

use plotters::prelude::*;

use crate::faults::Mix;
use crate::metrics::{CellStats, Results};

/// A plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the plot failed: {0}")]
pub(crate) struct PlotError(String);

/// What a plot shows on its y axis.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Measure {
    SuccessRate,
    ModelCallsPerTask,
}

impl Measure {
    fn title(self) -> &'static str {
        match self {
            Measure::SuccessRate => "Task success rate (%) against the fault rate",
            Measure::ModelCallsPerTask => "Model calls per task against the fault rate",
        }
    }

    fn axis(self) -> &'static str {
        match self {
            Measure::SuccessRate => "success %",
            Measure::ModelCallsPerTask => "model calls / task",
        }
    }

    fn value(self, stats: &CellStats) -> f64 {
        match self {
            Measure::SuccessRate => stats.success_rate() * 100.0,
            Measure::ModelCallsPerTask => stats.model_calls_per_task(),
        }
    }
}

const COLORS: [RGBColor; 9] = [
    RGBColor(120, 120, 120),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(204, 0, 102),
    RGBColor(0, 0, 0),
    RGBColor(117, 112, 179),
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
];

/// The plot as SVG text.
pub(crate) fn svg(results: &Results, mixes: &[Mix], measure: Measure) -> Result<String, PlotError> {
    let mut text = String::new();
    draw(&mut text, results, mixes, measure).map_err(|e| PlotError(e.to_string()))?;
    Ok(text)
}

fn draw(
    text: &mut String,
    results: &Results,
    mixes: &[Mix],
    measure: Measure,
) -> Result<(), Box<dyn std::error::Error>> {
    let rows = mixes.len().div_ceil(3).max(1);
    let root = SVGBackend::with_string(text, (1350, 380 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(measure.title(), ("sans-serif", 26))?;
    let strategies = results.strategies();
    let top = match measure {
        Measure::SuccessRate => 100.0,
        Measure::ModelCallsPerTask => {
            let most = results
                .cells
                .iter()
                .map(|c| measure.value(&c.stats))
                .fold(0.0, f64::max);
            (most * 1.1).max(1.0)
        }
    };
    for (i, (panel, &mix)) in root.split_evenly((rows, 3)).iter().zip(mixes).enumerate() {
        let mut chart = ChartBuilder::on(panel)
            .caption(mix.label(), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..50f64, 0f64..top)?;
        chart
            .configure_mesh()
            // The bold grid is enough to read a value; the fine one would triple the file.
            .max_light_lines(0)
            .x_labels(6)
            .y_labels(6)
            .x_desc("fault rate %")
            .y_desc(measure.axis())
            .draw()?;
        for (n, &strategy) in strategies.iter().enumerate() {
            let color = COLORS[n % COLORS.len()];
            let points: Vec<(f64, f64)> = results
                .cells
                .iter()
                .filter(|c| c.strategy == strategy && c.mix == mix)
                .map(|c| (c.rate * 100.0, measure.value(&c.stats)))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(strategy)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        if i > 0 {
            // One legend for the figure: the lines keep their colours in every panel.
            continue;
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
