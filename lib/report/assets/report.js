// fp8train report: draws the charts of the page from the JSON in <script id="report-data">
// with Chart.js (embedded above this script). No network access: everything is in the page.
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('report-data').textContent);
  const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#7f7f7f',
                   '#bcbd22', '#17becf'];
  const color = (i) => PALETTE[i % PALETTE.length];
  Chart.defaults.animation = false;
  Chart.defaults.font.size = 12;
  Chart.defaults.maintainAspectRatio = false;

  function el(tag, cls, parent, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  function points(series) {
    const out = [];
    for (let i = 0; i < series.step.length; i++) out.push({x: series.step[i], y: series.value[i]});
    return out;
  }

  // The finite range of `keys` over all runs from step `from` on (for charts that share a y axis).
  function range(keys, from) {
    let lo = Infinity, hi = -Infinity;
    for (const run of data.runs) {
      for (const k of keys) {
        run[k].value.forEach((v, i) => {
          if (v !== null && isFinite(v) && run[k].step[i] >= (from || -Infinity)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
        });
      }
    }
    const pad = Math.max(0.02 * (hi - lo), 1e-6 * Math.abs(hi));
    return lo <= hi ? {min: lo - pad, max: hi + pad} : {};
  }

  function lastStep(key) {
    let last = 0;
    for (const run of data.runs) last = Math.max(last, ...run[key].step);
    return last;
  }

  // One line chart: a curve per run (same color in every chart), step on x.
  function lineChart(parent, spec) {
    const box = el('div', 'chart', parent);
    const canvas = el('canvas', null, box);
    const datasets = data.runs.map((run, i) => ({
      label: run.name, data: points(run[spec.key]), borderColor: color(i), backgroundColor: color(i),
      borderWidth: spec.key === 'val_loss' ? 2 : 1.5, pointRadius: spec.key === 'val_loss' ? 3 : 0,
      spanGaps: true, tension: 0,
    })).filter((d) => d.data.length > 0);
    const y = {type: spec.log ? 'logarithmic' : 'linear', title: {display: true, text: spec.yTitle}};
    if (spec.range) Object.assign(y, spec.range);
    const x = {type: 'linear', title: {display: true, text: 'step'}};
    if (spec.from !== undefined) x.min = spec.from;
    if (spec.tick) y.ticks = {callback: spec.tick};
    new Chart(canvas, {
      type: 'line',
      data: {datasets},
      options: {
        parsing: false, normalized: true,
        interaction: {mode: 'nearest', intersect: false},
        scales: {x, y},
        plugins: {title: {display: true, text: spec.title}, legend: {position: 'top'}},
      },
    });
  }

  const si = (v) => {
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toPrecision(3) + 'G';
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + 'M';
    if (a >= 1e3) return (v / 1e3).toPrecision(3) + 'k';
    return String(+v.toPrecision(3));
  };

  function drawCurves() {
    const grid = document.getElementById('curves');
    const loss = range(['loss', 'val_loss']);
    lineChart(grid, {key: 'loss', title: 'Training loss', yTitle: 'loss (nats/token)', range: loss});
    lineChart(grid, {key: 'val_loss', title: 'Validation loss (same y axis)', yTitle: 'loss (nats/token)', range: loss});
    // Recipes often differ by little: the second half of the run on its own y range.
    const half = Math.floor(lastStep('loss') / 2);
    lineChart(grid, {key: 'loss', title: 'Training loss from step ' + half + ' (zoomed y axis)', yTitle: 'loss (nats/token)',
                     from: half, range: range(['loss'], half)});
    lineChart(grid, {key: 'lr', title: 'Learning rate', yTitle: 'learning rate', tick: (v) => Number(v).toExponential(1)});
    lineChart(grid, {key: 'grad_norm', title: 'Gradient norm (before clipping)', yTitle: 'global L2 norm', log: true,
                     tick: (v) => si(v)});
    lineChart(grid, {key: 'tokens_per_s', title: 'Throughput', yTitle: 'tokens/s', tick: (v) => si(v)});
  }

  // Color scales for the heatmaps: viridis-like for log magnitudes, white to red for fractions.
  const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const REDS = [[255, 255, 255], [252, 187, 161], [251, 106, 74], [203, 24, 29], [103, 0, 13]];
  function ramp(stops, t) {
    t = Math.min(1, Math.max(0, t)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(t)), f = t - i;
    const c = stops[i].map((a, k) => Math.round(a + f * (stops[i + 1][k] - a)));
    return 'rgb(' + c.join(',') + ')';
  }
  const gradient = (stops) => 'linear-gradient(to right,' + stops.map((_, i) => ramp(stops, i / (stops.length - 1))).join(',') + ')';

  const FP8_METRICS = [
    {key: 'scale', title: 'scale', unit: 'log2 scale', tf: (v) => (v > 0 ? Math.log2(v) : null), stops: VIRIDIS,
     label: (v) => '2^' + v.toFixed(1)},
    {key: 'amax', title: 'amax', unit: 'log10 amax', tf: (v) => (v > 0 ? Math.log10(v) : null), stops: VIRIDIS,
     label: (v) => '1e' + v.toFixed(1)},
    {key: 'saturated', title: '% saturated (clipped to the FP8 max)', unit: '% of elements', tf: (v) => 100 * v,
     stops: REDS, label: (v) => v.toPrecision(2) + '%', zeroBased: true},
    {key: 'underflow', title: '% underflow (flushed to zero)', unit: '% of elements', tf: (v) => 100 * v,
     stops: REDS, label: (v) => v.toPrecision(2) + '%', zeroBased: true},
  ];

  // A heatmap slot x step of one FP8 statistic: a scatter chart (the library's axes, ticks and
  // tooltips) whose points are invisible, with a plugin that fills one rectangle per cell.
  // The color range of a statistic over every run, so that the same color means the same value
  // in every run's heatmap.
  function colorRange(runs, m) {
    let lo = Infinity, hi = -Infinity;
    for (const run of runs) {
      for (const s of run.fp8.slots) {
        for (const raw of s[m.key]) {
          const v = raw === null ? null : m.tf(raw);
          if (v !== null && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
        }
      }
    }
    if (m.zeroBased || !(lo <= hi)) lo = 0;
    if (!(hi > lo)) hi = lo + 1;
    return {lo, hi};
  }

  function heatmap(parent, fp8, m, range) {
    const cells = [];
    const {lo, hi} = range;
    fp8.slots.forEach((s, j) => s[m.key].forEach((raw, i) => {
      const v = raw === null ? null : m.tf(raw);
      cells.push({x: fp8.steps[i], y: j, v: v !== null && isFinite(v) ? v : null, raw, i});
    }));
    const box = el('div', 'heat', parent);
    const nSlots = fp8.slots.length, nSteps = fp8.steps.length;
    box.style.height = (110 + 15 * nSlots) + 'px';
    const holder = el('div', null, box);
    holder.style.position = 'relative';
    holder.style.height = (80 + 15 * nSlots) + 'px';
    const canvas = el('canvas', null, holder);
    const steps = fp8.steps;
    // Cell i spans from halfway to the previous log step to halfway to the next one.
    const edge = (i) => (i <= 0 ? steps[0] - (steps.length > 1 ? (steps[1] - steps[0]) / 2 : 0.5)
                         : i >= steps.length ? steps[steps.length - 1] + (steps.length > 1 ? (steps[steps.length - 1] - steps[steps.length - 2]) / 2 : 0.5)
                         : (steps[i - 1] + steps[i]) / 2);
    const cellsPlugin = {
      id: 'cells',
      beforeDatasetsDraw(chart) {
        const {ctx, chartArea: a, scales: {x, y}} = chart;
        ctx.save();
        ctx.beginPath();
        ctx.rect(a.left, a.top, a.width, a.height);
        ctx.clip();
        for (const c of cells) {
          const x0 = x.getPixelForValue(edge(c.i)), x1 = x.getPixelForValue(edge(c.i + 1));
          const y0 = y.getPixelForValue(c.y - 0.5), y1 = y.getPixelForValue(c.y + 0.5);
          ctx.fillStyle = c.v === null ? '#ddd' : ramp(m.stops, (c.v - lo) / (hi - lo));
          ctx.fillRect(Math.min(x0, x1), Math.min(y0, y1), Math.abs(x1 - x0) + 0.5, Math.abs(y1 - y0) + 0.5);
        }
        ctx.restore();
      },
    };
    new Chart(canvas, {
      type: 'scatter',
      data: {datasets: [{label: m.title, data: cells, pointRadius: 0, pointHoverRadius: 0, pointHitRadius: 6}]},
      plugins: [cellsPlugin],
      options: {
        parsing: false,
        interaction: {mode: 'nearest', intersect: false},
        scales: {
          x: {type: 'linear', min: edge(0), max: edge(nSteps), ticks: {includeBounds: false},
              title: {display: true, text: 'step'}, grid: {display: false}},
          y: {type: 'linear', reverse: true, min: -0.5, max: nSlots - 0.5, afterBuildTicks: (ax) => {
                ax.ticks = fp8.slots.map((_, j) => ({value: j}));
              },
              ticks: {autoSkip: false, font: {size: 10}, callback: (v) => (fp8.slots[v] ? fp8.slots[v].slot : '')},
              grid: {display: false}, title: {display: true, text: 'FP8 slot'}},
        },
        plugins: {
          title: {display: true, text: m.title},
          legend: {display: false},
          tooltip: {callbacks: {label: (c) => fp8.slots[c.raw.y].slot + ' @ step ' + c.raw.x + ': ' +
                                  (c.raw.raw === null ? 'n/a' : Number(c.raw.raw).toPrecision(4))}},
        },
      },
    });
    const bar = el('div', 'colorbar', box);
    el('span', null, bar, m.label(lo));
    el('span', 'bar', bar).style.background = gradient(m.stops);
    el('span', null, bar, m.label(hi) + '  (' + m.unit + '; grey: no value)');
  }

  function drawFp8() {
    const section = document.getElementById('fp8');
    const runs = data.runs.filter((r) => r.fp8.slots.length > 0);
    if (runs.length === 0) {
      el('p', 'note', section, 'No run was trained with --fp8-stats: no per-slot FP8 statistics.');
      return;
    }
    const ranges = FP8_METRICS.map((m) => colorRange(runs, m));
    for (const run of runs) {
      el('h3', null, section, run.name + ' (' + run.fp8.slots.length + ' slots, ' + run.fp8.steps.length + ' log steps)');
      const grid = el('div', 'grid heatmaps', section);
      FP8_METRICS.forEach((m, k) => heatmap(grid, run.fp8, m, ranges[k]));
    }
  }

  // The table's color swatches: the color of each run's curves.
  document.querySelectorAll('.swatch').forEach((s) => { s.style.background = color(Number(s.dataset.run)); });
  drawCurves();
  drawFp8();
})();
