module cushare.test/hami

go 1.19
