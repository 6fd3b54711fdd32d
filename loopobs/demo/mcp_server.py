"""The showcase's MCP server: travel facts, served over stdio with the ``mcp`` SDK's server API.

Run by the ``concierge`` scenario as ``python -m loopobs.demo.mcp_server``.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

_VISAS = {
    "brazil": "No visa for stays up to 90 days; a passport valid for six months.",
    "japan": "No visa for stays up to 90 days.",
    "india": "An e-Visa, applied for online at least four days ahead.",
}


def build() -> MCPServer:
    """The server and its tools."""
    server = MCPServer("travel-facts")

    @server.tool()
    def visa_rules(country: str) -> str:
        """Entry rules for EU passport holders visiting a country."""
        return _VISAS.get(country.lower(), f"No rules on file for {country}.")

    @server.tool()
    def plug_type(country: str) -> str:
        """The power plug used in a country."""
        return {"brazil": "N", "japan": "A/B", "india": "C/D/M"}.get(country.lower(), "unknown")

    return server


if __name__ == "__main__":  # pragma: no cover - run as a process
    build().run("stdio")
