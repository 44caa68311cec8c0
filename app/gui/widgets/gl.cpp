// The only file with gl* calls. Heatmaps are drawn inside Dear ImGui's draw list: a callback switches
// to the heatmap program (and binds the colour table on unit 1), ImGui draws the quad with the value
// texture on unit 0, and ImDrawCallback_ResetRenderState hands the state back to the backend.
#include "widgets/gl.h"

#include <epoxy/gl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>

#include "base/errors.h"
#include "io/read_file.h"
#include "report/colormap.h"

namespace kvscope::gui::Gl {
namespace {

struct DrawParams {
    HeatmapStyle style;
    float grid[2] = {1, 1};  // (cols, rows)
};

struct State {
    std::string shaders_dir;
    std::string vert_src, frag_src;
    std::string error;
    GLuint program = 0;
    bool link_failed = false;
    GLint u_proj = -1, u_values = -1, u_colormap = -1, u_lo = -1, u_hi = -1, u_scale = -1, u_mode = -1,
          u_grid = -1;
    GLuint tables[2] = {0, 0};        // viridis, diverging: 256x1 RGBA8
    std::deque<DrawParams> params;    // stable addresses for this frame's callbacks
};
State g;

bool read_text(const std::string& path, std::string& out) {
    try {
        out = read_file_bounded(path, k_shader_file);
        return true;
    } catch (const LoadError&) {
        return false;  // the caller names the shader folder
    }
}

GLuint compile(GLenum kind, const std::string& src, const char* name) {
    GLuint s = glCreateShader(kind);
    const char* text = src.c_str();
    glShaderSource(s, 1, &text, nullptr);
    glCompileShader(s);
    GLint ok = 0;
    glGetShaderiv(s, GL_COMPILE_STATUS, &ok);
    if (!ok) {
        char log[2048] = {};
        glGetShaderInfoLog(s, sizeof log, nullptr, log);
        g.error = std::string(name) + ": " + log;
        glDeleteShader(s);
        return 0;
    }
    return s;
}

GLuint make_table(const ColorTable& table) {
    uint8_t rgba[256 * 4];
    for (int i = 0; i < 256; ++i) {
        rgba[i * 4 + 0] = table[size_t(i)][0];
        rgba[i * 4 + 1] = table[size_t(i)][1];
        rgba[i * 4 + 2] = table[size_t(i)][2];
        rgba[i * 4 + 3] = 255;
    }
    GLuint t = 0;
    glGenTextures(1, &t);
    glBindTexture(GL_TEXTURE_2D, t);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_LINEAR);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_LINEAR);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
    glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
    glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, 256, 1, 0, GL_RGBA, GL_UNSIGNED_BYTE, rgba);
    return t;
}

// Linked lazily inside the first callback: the attribute locations must be the ones ImGui's backend
// program uses, because the quad comes from the backend's vertex array.
bool link_program() {
    if (g.program) return true;
    if (g.link_failed) return false;
    GLint backend = 0;
    glGetIntegerv(GL_CURRENT_PROGRAM, &backend);
    GLuint vs = compile(GL_VERTEX_SHADER, g.vert_src, "heatmap.vert");
    GLuint fs = vs ? compile(GL_FRAGMENT_SHADER, g.frag_src, "heatmap.frag") : 0;
    if (!vs || !fs) {
        g.link_failed = true;
        return false;
    }
    GLuint p = glCreateProgram();
    glAttachShader(p, vs);
    glAttachShader(p, fs);
    for (const char* name : {"Position", "UV", "Color"}) {
        GLint loc = backend ? glGetAttribLocation(GLuint(backend), name) : -1;
        if (loc >= 0) glBindAttribLocation(p, GLuint(loc), name);
    }
    glLinkProgram(p);
    glDeleteShader(vs);
    glDeleteShader(fs);
    GLint ok = 0;
    glGetProgramiv(p, GL_LINK_STATUS, &ok);
    if (!ok) {
        char log[2048] = {};
        glGetProgramInfoLog(p, sizeof log, nullptr, log);
        g.error = std::string("heatmap program: ") + log;
        glDeleteProgram(p);
        g.link_failed = true;
        return false;
    }
    g.program = p;
    g.u_proj = glGetUniformLocation(p, "u_proj");
    g.u_values = glGetUniformLocation(p, "u_values");
    g.u_colormap = glGetUniformLocation(p, "u_colormap");
    g.u_lo = glGetUniformLocation(p, "u_lo");
    g.u_hi = glGetUniformLocation(p, "u_hi");
    g.u_scale = glGetUniformLocation(p, "u_scale");
    g.u_mode = glGetUniformLocation(p, "u_mode");
    g.u_grid = glGetUniformLocation(p, "u_grid");
    return true;
}

void use_heatmap_program(const ImDrawList*, const ImDrawCmd* cmd) {
    if (!link_program()) return;  // the quad then draws with ImGui's own program: raw texture, still usable
    const auto* d = static_cast<const DrawParams*>(cmd->UserCallbackData);
    const ImDrawData* dd = ImGui::GetDrawData();
    const float L = dd->DisplayPos.x, R = dd->DisplayPos.x + dd->DisplaySize.x;
    const float T = dd->DisplayPos.y, B = dd->DisplayPos.y + dd->DisplaySize.y;
    const float proj[16] = {2.0f / (R - L), 0, 0, 0, 0, 2.0f / (T - B), 0, 0, 0, 0, -1, 0,
                            (R + L) / (L - R), (T + B) / (B - T), 0, 1};
    glUseProgram(g.program);
    glUniformMatrix4fv(g.u_proj, 1, GL_FALSE, proj);
    glUniform1i(g.u_values, 0);
    glUniform1i(g.u_colormap, 1);
    glUniform1f(g.u_lo, d->style.lo);
    glUniform1f(g.u_hi, d->style.hi);
    glUniform1i(g.u_scale, int(d->style.scale));
    glUniform1i(g.u_mode, d->style.mask_only ? 1 : 0);
    glUniform2f(g.u_grid, d->grid[0], d->grid[1]);
    glActiveTexture(GL_TEXTURE1);
    glBindTexture(GL_TEXTURE_2D, g.tables[d->style.colormap == Colormap::Viridis ? 0 : 1]);
    glActiveTexture(GL_TEXTURE0);
}

}  // namespace

bool init(const std::string& shaders_dir) {
    g.shaders_dir = shaders_dir;
    if (!read_text(shaders_dir + "/heatmap.vert", g.vert_src) || !read_text(shaders_dir + "/heatmap.frag", g.frag_src)) {
        g.error = "cannot read the heatmap shaders in " + shaders_dir + " (set KVSCOPE_SHADERS to the shaders/ folder)";
        return false;
    }
    // Compile once now so a broken shader is reported at start, not in the middle of a frame.
    GLuint vs = compile(GL_VERTEX_SHADER, g.vert_src, "heatmap.vert");
    GLuint fs = vs ? compile(GL_FRAGMENT_SHADER, g.frag_src, "heatmap.frag") : 0;
    if (vs) glDeleteShader(vs);
    if (fs) glDeleteShader(fs);
    if (!vs || !fs) return false;
    g.tables[0] = make_table(viridis());
    g.tables[1] = make_table(diverging());
    return true;
}

const std::string& error() { return g.error; }

unsigned upload(unsigned tex, int64_t rows, int64_t cols, const float* values, const uint8_t* visible) {
    std::vector<float> rg(size_t(rows * cols * 2));  // (rows, cols, 2): value, visible
    for (int64_t i = 0; i < rows * cols; ++i) {
        rg[size_t(2 * i)] = values ? values[i] : 0.0f;
        rg[size_t(2 * i + 1)] = visible ? float(visible[i] != 0) : 1.0f;
    }
    GLuint t = tex;
    if (!t) {
        glGenTextures(1, &t);
        glBindTexture(GL_TEXTURE_2D, t);
        glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
        glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
        glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
        glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
    } else {
        glBindTexture(GL_TEXTURE_2D, t);
    }
    glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
    glPixelStorei(GL_UNPACK_ROW_LENGTH, 0);
    glTexImage2D(GL_TEXTURE_2D, 0, GL_RG32F, GLsizei(cols), GLsizei(rows), 0, GL_RG, GL_FLOAT, rg.data());
    return t;
}

void release(unsigned tex) {
    if (!tex) return;
    GLuint t = tex;
    glDeleteTextures(1, &t);
}

void begin_frame() { g.params.clear(); }

void draw_heatmap(ImDrawList* dl, unsigned tex, int64_t rows, int64_t cols, ImVec2 p0, ImVec2 p1, ImVec2 uv0,
                  ImVec2 uv1, const HeatmapStyle& style) {
    if (!tex) return;
    g.params.push_back({style, {float(cols), float(rows)}});
    dl->AddCallback(use_heatmap_program, &g.params.back());
    dl->AddImage(ImTextureID(intptr_t(tex)), p0, p1, uv0, uv1);
    dl->AddCallback(ImDrawCallback_ResetRenderState, nullptr);
}

std::vector<uint8_t> read_framebuffer(int width, int height) {
    std::vector<uint8_t> rgba(size_t(width) * size_t(height) * 4);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadBuffer(GL_BACK);
    glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, rgba.data());
    std::vector<uint8_t> flipped(rgba.size());  // GL rows run bottom to top
    const size_t stride = size_t(width) * 4;
    for (int y = 0; y < height; ++y)
        std::copy_n(rgba.data() + size_t(height - 1 - y) * stride, stride, flipped.data() + size_t(y) * stride);
    return flipped;
}

void finish() { glFinish(); }

}  // namespace kvscope::gui::Gl
