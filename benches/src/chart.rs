//! `iggy-bench compare --out chart.svg`: throughput per scenario as a ratio to the raw prefilled
//! baseline (grouped bars, one colour per engine), and the latency CDF of single published
//! records per engine. SVG only, so no font or image libraries are needed.

use std::path::Path;

use plotters::prelude::*;

use crate::compare::{Cell, Scenario};
use crate::engines::EngineKind;

const COLOURS: [RGBColor; 9] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
];

fn colour(index: usize) -> RGBColor {
    COLOURS[index % COLOURS.len()]
}

/// Draws the chart of `cells` into the SVG file at `path`.
pub fn write_svg(cells: &[Cell], engines: &[EngineKind], path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(500);
    ratios(cells, engines, &top)?;
    cdf(cells, engines, &bottom)?;
    root.present().map_err(|e| e.to_string())
}

fn ratios<DB: DrawingBackend>(
    cells: &[Cell],
    engines: &[EngineKind],
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| cells.iter().any(|c| c.scenario == *s && c.median.is_some()))
        .collect();
    let ratio = |scenario: Scenario, engine: EngineKind| {
        let find = |e| {
            cells
                .iter()
                .find(|c| c.scenario == scenario && c.engine == e)
                .and_then(|c| c.median)
        };
        Some(find(engine)? / find(EngineKind::RawPrefilled)?)
    };
    let max = scenarios
        .iter()
        .flat_map(|s| engines.iter().filter_map(move |e| ratio(*s, *e)))
        .fold(1.0f64, f64::max)
        .min(4.0);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "throughput / raw-prefilled (same run; capped at 4; \u{2020} = no fsync)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..scenarios.len() as f64, -max * 0.1..max * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("ratio")
        .draw()
        .map_err(|e| e.to_string())?;
    // One label under each group of bars (a numeric axis would label its own ticks instead).
    let label_style =
        TextStyle::from(("sans-serif", 14)).pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Center,
        ));
    chart
        .draw_series(scenarios.iter().enumerate().map(|(i, scenario)| {
            Text::new(
                short_name(*scenario),
                (i as f64 + 0.5, -max * 0.05),
                label_style.clone(),
            )
        }))
        .map_err(|e| e.to_string())?;
    let width = 0.8 / engines.len().max(1) as f64;
    for (e, engine) in engines.iter().enumerate() {
        let bars = scenarios.iter().enumerate().filter_map(|(s, scenario)| {
            let value = ratio(*scenario, *engine)?.min(max * 1.1);
            let left = s as f64 + 0.1 + e as f64 * width;
            Some(Rectangle::new(
                [(left, 0.0), (left + width * 0.9, value)],
                colour(e).filled(),
            ))
        });
        let label = if engine.sync_reaches_disk() {
            engine.name().to_string()
        } else {
            format!("{} \u{2020}", engine.name())
        };
        chart
            .draw_series(bars)
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour(e).filled())
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

fn short_name(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::PublishedBatches => "batches, published",
        Scenario::SteadyBatches => "batches, steady",
        Scenario::UnpublishedBatches => "batches, unpublished",
        Scenario::SinglePublished => "single, published",
        Scenario::Concurrent64 => "64 appenders",
        Scenario::ReplayWarm => "replay warm",
        Scenario::ReplayCold => "replay cold",
    }
}

fn cdf<DB: DrawingBackend>(
    cells: &[Cell],
    engines: &[EngineKind],
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let scenario = Scenario::SinglePublished;
    let series: Vec<(usize, &EngineKind, &Cell)> = engines
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            cells
                .iter()
                .find(|c| c.scenario == scenario && c.engine == *e && !c.cdf.is_empty())
                .map(|c| (i, e, c))
        })
        .collect();
    let max_us = series
        .iter()
        .flat_map(|(_, _, c)| c.cdf.iter().map(|(us, _)| *us))
        .fold(10.0f64, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "latency CDF, single records published one by one (us, log scale)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((1f64..max_us * 1.2).log_scale(), 0f64..1f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("microseconds per durable append")
        .y_desc("fraction of appends")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, engine, cell) in series {
        let points = cell.cdf.iter().map(|(us, q)| (us.max(1.0), *q));
        chart
            .draw_series(LineSeries::new(points, colour(i).stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(engine.name())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 15, y)], colour(i)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
