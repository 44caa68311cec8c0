#version 330 core
// Heatmap colouring. u_values is an RG32F texture, one texel per cell: r = value, g = 1 when the cell is
// visible (0 = masked). The colour comes from a 256x1 table (u_colormap): viridis for weights, a
// diverging blue-grey-red map for signed scores and K/V. Masked cells get diagonal grey stripes that
// neither table contains. Thin cell borders appear once cells are big enough to tell apart.
uniform sampler2D u_values;
uniform sampler2D u_colormap;
uniform float u_lo;        // value drawn with the first table entry
uniform float u_hi;        // value drawn with the last table entry
uniform int u_scale;       // 0 linear, 1 log10 (sequential), 2 symmetric log (diverging)
uniform int u_mode;        // 0 values, 1 mask only (visible = flat colour, masked = stripes)
uniform vec2 u_grid;       // (columns, rows) of the texture; 0 = pooled blocks, no borders
in vec2 v_uv;
out vec4 out_color;

float scaled(float v) {
    if (u_scale == 1) return log(max(v, 1e-6)) / log(10.0);
    if (u_scale == 2) return sign(v) * log(1.0 + abs(v));
    return v;
}

void main() {
    vec4 cell = texture(u_values, v_uv);
    vec3 rgb;
    if (cell.g < 0.5) {
        // Stripes of 3 px along x + y, the same hatch as the exported PNGs.
        float s = mod(floor((gl_FragCoord.x + gl_FragCoord.y) / 3.0), 2.0);
        rgb = s < 0.5 ? vec3(64.0 / 255.0) : vec3(128.0 / 255.0);
    } else if (u_mode == 1) {
        rgb = vec3(0.35, 0.72, 0.60);
    } else {
        float lo = scaled(u_lo), hi = scaled(u_hi);
        float t = clamp((scaled(cell.r) - lo) / max(hi - lo, 1e-12), 0.0, 1.0);
        rgb = texture(u_colormap, vec2((t * 255.0 + 0.5) / 256.0, 0.5)).rgb;
        if (isnan(cell.r)) rgb = vec3(1.0, 0.0, 1.0);
    }
    // Cell borders when a cell is at least 7 px wide and tall.
    vec2 pos = v_uv * u_grid;
    vec2 px = fwidth(pos);
    if (u_grid.x > 0.0 && px.x < 1.0 / 7.0 && px.y < 1.0 / 7.0) {
        vec2 f = fract(pos);
        vec2 edge = min(f, 1.0 - f) / px;
        if (min(edge.x, edge.y) < 0.5) rgb *= 0.75;
    }
    out_color = vec4(rgb, 1.0);
}
