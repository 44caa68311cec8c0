#version 330 core
// One textured quad per heatmap, drawn through Dear ImGui's vertex buffer (the attribute locations are
// bound to the backend's at link time). uv addresses the value texture: (0,0) = first row, first column.
uniform mat4 u_proj;
in vec2 Position;
in vec2 UV;
in vec4 Color;
out vec2 v_uv;
void main() {
    v_uv = UV;
    gl_Position = u_proj * vec4(Position.xy, 0.0, 1.0);
}
