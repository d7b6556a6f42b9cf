// A small line chart on a canvas: the last `capacity` values of one or two series.

export class LineChart {
  constructor(canvas, series, capacity = 60) {
    this.canvas = canvas;
    this.series = series; // [{name, color}]
    this.capacity = capacity;
    this.values = series.map(() => []);
    this.samples = 0;
  }

  push(...values) {
    values.forEach((v, i) => {
      const list = this.values[i];
      list.push(v === null || v === undefined ? NaN : Number(v));
      if (list.length > this.capacity) list.shift();
    });
    this.samples += 1;
    this.canvas.dataset.samples = String(this.samples);
    this.canvas.dataset.last = String(values[0] ?? "");
    this.draw();
  }

  draw() {
    const canvas = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 600, height = canvas.clientHeight || 160;
    canvas.width = width * ratio; canvas.height = height * ratio;
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    ctx.clearRect(0, 0, width, height);
    const pad = 28;
    let max = 0;
    for (const list of this.values) for (const v of list) if (Number.isFinite(v)) max = Math.max(max, v);
    max = max > 0 ? max * 1.1 : 1;
    ctx.strokeStyle = "#e5e7eb"; ctx.fillStyle = "#6b7280"; ctx.font = "11px sans-serif";
    for (let i = 0; i <= 4; i += 1) {
      const y = pad / 2 + ((height - pad) * i) / 4;
      ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(width, y); ctx.stroke();
      ctx.fillText((max * (1 - i / 4)).toPrecision(3), 0, y + 4);
    }
    this.values.forEach((list, s) => {
      ctx.strokeStyle = this.series[s].color; ctx.lineWidth = 2; ctx.beginPath();
      let started = false;
      list.forEach((v, i) => {
        if (!Number.isFinite(v)) { started = false; return; }
        const x = pad + ((width - pad) * i) / Math.max(1, this.capacity - 1);
        const y = pad / 2 + (height - pad) * (1 - v / max);
        if (started) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        started = true;
      });
      ctx.stroke();
      ctx.fillStyle = this.series[s].color;
      ctx.fillText(this.series[s].name, pad + 8 + s * 120, 12);
    });
  }
}
