"""One module per CLI subcommand (see replayssm_quant.cli)."""
