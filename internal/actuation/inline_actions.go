package actuation

// CheckTemplateInlineCode applies the inline-code rule of command profiles to an action's
// argv template (issue 10): exe is the program, literals the template's literal elements
// after argv[0], and variable says whether the template has a placeholder a caller fills
// (treated as an atom that may be anything). The code is shell-string.
func CheckTemplateInlineCode(exe string, literals []string, variable bool, field string) *Refusal {
	var prefixes []string
	if variable {
		prefixes = []string{""}
	}
	return checkInlineCode(CodeShellString, exe, literals, field, 1, prefixes, field)
}
