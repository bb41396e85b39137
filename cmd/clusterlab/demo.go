package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "demo",
		Short: "Run the built-in demonstration scenario",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "clusterlab demo: the demonstration scenario is not built yet (see README.md, 'Status').")
			return nil
		},
	})
}
